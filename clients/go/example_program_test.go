package rota_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// exampleRuns counts TestExampleProgram's runs in this process.
var exampleRuns atomic.Int32

// The README's example program (cmd/example) runs against the test server: a first run
// creates its task and consumes it, a second finds the same task (its key) done.
func TestExampleProgram(t *testing.T) {
	needServer(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no `go` command to build cmd/example with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	program := filepath.Join(t.TempDir(), "example")
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", program, "./cmd/example").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/example: %v\n%s", err, out)
	}
	runExample := func() string {
		cmd := exec.CommandContext(ctx, program)
		cmd.Env = append(os.Environ(), "ROTA_SERVER="+serverURL, "ROTA_API_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cmd/example: %v\n%s", err, out)
		}
		return string(out)
	}

	if exampleRuns.Add(1) > 1 { // go test -count=N: the server, and the task, remain
		if out := runExample(); !regexp.MustCompile(`task \d+ is succeeded \(new: false\)`).MatchString(out) {
			t.Fatalf("a later run:\n%s", out)
		}
		return
	}
	first := runExample()
	if !regexp.MustCompile(`task \d+ is pending \(new: true\)`).MatchString(first) ||
		!strings.Contains(first, "closing order 42 (attempt 1)") ||
		!regexp.MustCompile(`task \d+ is succeeded\n$`).MatchString(first) {
		t.Fatalf("first run:\n%s", first)
	}
	second := runExample()
	if !regexp.MustCompile(`task \d+ is succeeded \(new: false\)`).MatchString(second) || strings.Contains(second, "closing") {
		t.Fatalf("second run:\n%s", second)
	}
}
