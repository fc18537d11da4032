package rota_test

// The tests' server: one real `rota standalone` process started by TestMain, as
// clients/python/tests/conftest.py starts it, and a fresh pull job per test.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rota "github.com/rota-scheduler/rota/clients/go"
)

const token = "test-token"

// defaultBin is the workspace's debug build, relative to this package's directory (the
// tests' working directory).
const defaultBin = "../../target/debug/rota"

var (
	// serverURL is the running node's URL; "" when none runs, with noServer saying why.
	serverURL string
	noServer  string
	jobNumber atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	binary, err := rotaBin()
	if err != nil {
		noServer = err.Error()
		fmt.Fprintln(os.Stderr, "rota client tests:", noServer)
		return m.Run() // the tests that need the server skip (or fail under CI=true)
	}
	dir, err := os.MkdirTemp("", "rota-go-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	node, err := startNode(binary, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rota client tests:", err)
		return 1
	}
	defer node.stop()
	serverURL = node.url
	// The brief's job, checked once: a pull job with 2 attempts.
	if err := createPullJob(context.Background(), "orders"); err != nil {
		fmt.Fprintln(os.Stderr, "rota client tests: creating the job `orders`:", err)
		return 1
	}
	return m.Run()
}

// rotaBin is the rota binary: ROTA_BIN (relative to this directory), else defaultBin.
func rotaBin() (string, error) {
	path := os.Getenv("ROTA_BIN")
	if path == "" {
		path = defaultBin
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	info, err := os.Stat(abs)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("rota binary not found or not executable: %s (set ROTA_BIN, or build it with `cargo build -p rota`)", abs)
	}
	return abs, nil
}

// node is a running `rota standalone`.
type node struct {
	cmd    *exec.Cmd
	url    string
	stderr string // the path of its stderr log
}

// startNode starts `rota standalone --data-dir DIR/data --listen 127.0.0.1:0` with
// ROTA_API_TOKEN set, reads its URL from the first line of its stdout (draining the
// rest so the pipe never fills) and waits until /healthz answers 200.
func startNode(binary, dir string) (*node, error) {
	stderrPath := filepath.Join(dir, "rota-stderr.log")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd := exec.Command(binary, "standalone", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "ROTA_API_TOKEN="+token)
	cmd.Stdin = nil
	cmd.Stderr = stderr
	setParentDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// The child's parent-death signal is tied to the thread that started it.
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	n := &node{cmd: cmd, stderr: stderrPath}

	firstLine := make(chan string, 1)
	go func() {
		reader := bufio.NewReader(stdout)
		line, _ := reader.ReadString('\n')
		firstLine <- line
		_, _ = io.Copy(io.Discard, reader)
	}()
	var line string
	select {
	case line = <-firstLine:
	case <-time.After(30 * time.Second):
	}
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line)
	if url == "" {
		n.stop()
		return nil, fmt.Errorf("rota standalone printed no URL (first line %q):\n%s", line, n.stderrTail())
	}
	n.url = url
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("rota standalone at %s never became healthy:\n%s", url, n.stderrTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop terminates the node, killing it if it has not exited after 15 s.
func (n *node) stop() {
	_ = n.cmd.Process.Signal(terminateSignal)
	exited := make(chan struct{})
	go func() {
		_ = n.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = n.cmd.Process.Kill()
		<-exited
	}
}

func (n *node) stderrTail() string {
	data, _ := os.ReadFile(n.stderr)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// needServer skips the test when no server runs (fails it under CI=true).
func needServer(t *testing.T) {
	t.Helper()
	if serverURL != "" {
		return
	}
	if strings.EqualFold(os.Getenv("CI"), "true") {
		t.Fatal(noServer)
	}
	t.Skip(noServer)
}

// newClient is a client of the test server.
func newClient(t *testing.T) *rota.Client {
	t.Helper()
	needServer(t)
	c, err := rota.NewClient(serverURL, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testContext bounds a test's calls: a hang guard, never a timing assertion.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// jobBody is the pull job of clients/python/tests/conftest.py.
func jobBody(name string) map[string]any {
	return map[string]any{
		"name":         name,
		"app":          "shop",
		"schedule":     map[string]any{"kind": "none"},
		"delivery":     map[string]any{"kind": "pull"},
		"max_attempts": 2,
	}
}

func createPullJob(ctx context.Context, name string) error {
	c, err := rota.NewClient(serverURL, token)
	if err != nil {
		return err
	}
	var job struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	if err := c.Do(ctx, http.MethodPost, "/api/v1/jobs", jobBody(name), &job); err != nil {
		return err
	}
	if job.Name != name || job.ID == 0 {
		return fmt.Errorf("created job %+v, not %q", job, name)
	}
	return nil
}

// newJob creates a fresh pull job (`orders-N`, like `orders`) so that tests never pull
// each other's tasks.
func newJob(t *testing.T) string {
	t.Helper()
	needServer(t)
	name := fmt.Sprintf("orders-%d", jobNumber.Add(1))
	if err := createPullJob(testContext(t), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// pullN pulls until n tasks came (they fall due through the scheduler's wheel).
func pullN(t *testing.T, c *rota.Client, job string, n int, lease time.Duration) []rota.Pulled {
	t.Helper()
	var got []rota.Pulled
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d tasks were pulled: %+v", len(got), n, got)
		}
		items, err := c.Pull(testContext(t), job, rota.PullOptions{Max: n - len(got), Lease: lease, Wait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, items...)
	}
	return got
}

func pullOne(t *testing.T, c *rota.Client, job string, lease time.Duration) rota.Pulled {
	t.Helper()
	return pullN(t, c, job, 1, lease)[0]
}

// run is a run as GET /api/v1/runs shows it (the fields the tests read).
type run struct {
	Attempt  int    `json:"attempt"`
	Status   string `json:"status"`
	Message  string `json:"message"`
	Executor string `json:"executor"`
}

// runsOf is task's runs, by attempt.
func runsOf(t *testing.T, c *rota.Client, task int64) []run {
	t.Helper()
	var page struct {
		Items []run `json:"items"`
	}
	if err := c.Do(testContext(t), http.MethodGet, fmt.Sprintf("/api/v1/runs?task=%d", task), nil, &page); err != nil {
		t.Fatal(err)
	}
	runs := page.Items
	sort.Slice(runs, func(i, j int) bool { return runs[i].Attempt < runs[j].Attempt })
	return runs
}

// apiError is err as an *APIError, failing the test if it is not one.
func apiError(t *testing.T, err error) *rota.APIError {
	t.Helper()
	var apiErr *rota.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("want an *rota.APIError, got %T: %v", err, err)
	}
	return apiErr
}

// waitFor polls cond until it holds; the deadline is a hang guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
