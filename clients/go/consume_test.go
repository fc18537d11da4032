package rota_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rota "github.com/rota-scheduler/rota/clients/go"
)

// logBuffer collects a consumer's log lines; they are shown when the test fails.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLogger(t *testing.T) (*slog.Logger, *logBuffer) {
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs)
		}
	})
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), logs
}

// consumeInBackground runs Consume until ctx is cancelled; the returned function
// answers Consume's error, failing the test if Consume does not return (a hang guard).
func consumeInBackground(ctx context.Context, t *testing.T, c *rota.Client, job string, handler rota.Handler, opts rota.ConsumeOptions) func() error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, job, handler, opts) }()
	return func() error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(90 * time.Second):
			t.Fatal("Consume did not return")
			return nil
		}
	}
}

// stoppable is a context for Consume and the function that stops it.
func stoppable(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(testContext(t))
	t.Cleanup(cancel)
	return ctx, cancel
}

func TestConsumeAcksAndNacks(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	ids, err := c.CreateTasks(ctx, []rota.NewTask{
		{Job: job, Payload: "a", Key: "a"},
		{Job: job, Payload: "b", Key: "b"},
		{Job: job, Payload: "c", Key: "c"},
	})
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := newLogger(t)

	var (
		mu        sync.Mutex
		seen      []string
		succeeded = map[string]bool{}
	)
	consumeCtx, cancel := stoppable(t)
	handler := func(ctx context.Context, item rota.Pulled) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s%d", item.Payload, item.Attempt))
		switch {
		case item.Payload == "b" && item.Attempt == 1:
			return errors.New("b is not ready")
		case item.Payload == "c" && item.Attempt == 1:
			panic("c blew up")
		}
		succeeded[item.Payload] = true
		if len(succeeded) == 3 {
			cancel() // the last one is acked all the same
		}
		return nil
	}
	wait := consumeInBackground(consumeCtx, t, c, job, handler, rota.ConsumeOptions{
		Consumer: "go-test", Max: 10, Lease: 5 * time.Second, Wait: time.Second, Logger: logger,
	})
	if err := wait(); err != nil {
		t.Fatalf("Consume: %v", err)
	}

	sort.Strings(seen)
	if got := strings.Join(seen, " "); got != "a1 b1 b2 c1 c2" {
		t.Fatalf("handled %s, want a1 b1 b2 c1 c2", got)
	}
	for i, id := range ids {
		task, err := c.GetTask(ctx, id)
		if err != nil || task.Status != rota.TaskSucceeded || task.Attempts != []int{1, 2, 2}[i] {
			t.Fatalf("task %d: %+v, %v", id, task, err)
		}
	}
	b := runsOf(t, c, ids[1])
	if len(b) != 2 || b[0].Status != "failed" || b[0].Message != "b is not ready" || b[0].Executor != "pull:go-test" ||
		b[1].Status != "succeeded" {
		t.Fatalf("runs of b: %+v", b)
	}
	if cRuns := runsOf(t, c, ids[2]); len(cRuns) != 2 || cRuns[0].Status != "failed" || cRuns[0].Message != "panic: c blew up" {
		t.Fatalf("runs of c: %+v", cRuns)
	}
}

// A handler slower than the lease keeps its task: the lease is extended meanwhile, and a
// second consumer pulling all the while gets nothing.
func TestConsumeExtendsTheLeaseWhileTheHandlerWorks(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	task, err := c.CreateTask(ctx, rota.NewTask{Job: job, Payload: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	logger, logs := newLogger(t)

	const lease = 2 * time.Second
	started := make(chan struct{})
	var handlerDone atomic.Bool
	var handlerCtxErr error
	consumeCtx, cancel := stoppable(t)
	handler := func(ctx context.Context, item rota.Pulled) error {
		close(started)
		// The work: well past the lease and the server's one-second expiry check.
		select {
		case <-time.After(2*lease + 2*time.Second):
		case <-ctx.Done():
		}
		handlerCtxErr = ctx.Err()
		handlerDone.Store(true)
		cancel()
		return nil
	}
	wait := consumeInBackground(consumeCtx, t, c, job, handler, rota.ConsumeOptions{
		Consumer: "slow", Max: 1, Lease: lease, Wait: time.Second, Logger: logger,
	})

	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the task never reached the handler")
	}
	var rival []rota.Pulled
	for !handlerDone.Load() {
		items, err := c.Pull(ctx, job, rota.PullOptions{Wait: 500 * time.Millisecond, Consumer: "rival"})
		if err != nil {
			t.Fatal(err)
		}
		rival = append(rival, items...)
	}
	if err := wait(); err != nil {
		t.Fatalf("Consume: %v", err)
	}

	if len(rival) != 0 {
		t.Fatalf("the task was delivered to another consumer while its handler worked: %+v", rival)
	}
	if handlerCtxErr != nil {
		t.Fatalf("the handler's context ended early: %v", handlerCtxErr)
	}
	got, err := c.GetTask(ctx, task.ID)
	if err != nil || got.Status != rota.TaskSucceeded || got.Attempts != 1 {
		t.Fatalf("task: %+v, %v", got, err)
	}
	runs := runsOf(t, c, task.ID)
	if len(runs) != 1 || runs[0].Status != "succeeded" || runs[0].Executor != "pull:slow" {
		t.Fatalf("runs %+v", runs)
	}
	if strings.Contains(logs.String(), "lost") {
		t.Fatalf("a lease was lost:\n%s", logs)
	}
}

func TestConsumeStopsCleanly(t *testing.T) {
	c, ctx := newClient(t), testContext(t)
	logger, _ := newLogger(t)

	t.Run("idle long poll", func(t *testing.T) {
		job := newJob(t)
		calls := atomic.Int32{}
		consumeCtx, cancel := stoppable(t)
		wait := consumeInBackground(consumeCtx, t, c, job, func(context.Context, rota.Pulled) error {
			calls.Add(1)
			return nil
		}, rota.ConsumeOptions{Wait: 30 * time.Second, Logger: logger})
		time.Sleep(300 * time.Millisecond) // let the long poll start (it stops either way)
		cancel()
		if err := wait(); err != nil || calls.Load() != 0 {
			t.Fatalf("Consume: %v after %d calls", err, calls.Load())
		}
	})

	t.Run("a handler that finishes after the stop is acked", func(t *testing.T) {
		job := newJob(t)
		task, err := c.CreateTask(ctx, rota.NewTask{Job: job})
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		consumeCtx, cancel := stoppable(t)
		wait := consumeInBackground(consumeCtx, t, c, job, func(ctx context.Context, _ rota.Pulled) error {
			close(started)
			<-ctx.Done() // the stop reaches the handler
			return nil   // and it completes its work
		}, rota.ConsumeOptions{Logger: logger})
		<-started
		cancel()
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.GetTask(ctx, task.ID); err != nil || got.Status != rota.TaskSucceeded {
			t.Fatalf("task: %+v, %v", got, err)
		}
	})

	t.Run("a handler that gives up after the stop is not nacked", func(t *testing.T) {
		job := newJob(t)
		task, err := c.CreateTask(ctx, rota.NewTask{Job: job})
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		consumeCtx, cancel := stoppable(t)
		wait := consumeInBackground(consumeCtx, t, c, job, func(ctx context.Context, _ rota.Pulled) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, rota.ConsumeOptions{Logger: logger})
		<-started
		cancel()
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		// Still leased (30 s): delivered again once the lease expires, no attempt failed.
		got, err := c.GetTask(ctx, task.ID)
		if err != nil || got.Status != rota.TaskRunning || got.Attempts != 1 {
			t.Fatalf("task: %+v, %v", got, err)
		}
		if runs := runsOf(t, c, task.ID); len(runs) != 1 || runs[0].Status != "running" {
			t.Fatalf("runs %+v", runs)
		}
	})

	t.Run("a refused pull is returned", func(t *testing.T) {
		consumeCtx, _ := stoppable(t)
		wait := consumeInBackground(consumeCtx, t, c, "no-such-job", func(context.Context, rota.Pulled) error {
			return nil
		}, rota.ConsumeOptions{Logger: logger})
		if err := wait(); !errors.Is(err, rota.ErrNotFound) {
			t.Fatalf("Consume of an unknown job: %v", err)
		}
	})
}
