package rota_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	rota "github.com/rota-scheduler/rota/clients/go"
)

func TestPullAndAck(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	task, err := c.CreateTask(ctx, rota.NewTask{Job: job, Payload: "hello", Key: "k-ack", Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	item := pullOne(t, c, job, 0)
	if item.Task != task.ID || item.Attempt != 1 || item.Payload != "hello" || item.Key != "k-ack" ||
		item.Priority != 3 || item.Lease == "" || !item.DueAt.Equal(task.DueAt) {
		t.Fatalf("pulled %+v for %+v", item, task)
	}
	// The default lease is 30 s.
	if !item.LeaseExpiresAt.After(item.DueAt.Add(20 * time.Second)) {
		t.Fatalf("lease ends %v", item.LeaseExpiresAt)
	}
	if got, err := c.GetTask(ctx, task.ID); err != nil || got.Status != rota.TaskRunning || got.Attempts != 1 {
		t.Fatalf("while leased: %+v, %v", got, err)
	}

	acked, err := c.Ack(ctx, item.Task, item.Lease)
	if err != nil {
		t.Fatal(err)
	}
	if acked.Status != rota.TaskSucceeded {
		t.Fatalf("acked %+v", acked)
	}

	// The attempt has ended: its lease is stale, a 409 that changes nothing.
	_, err = c.Ack(ctx, item.Task, item.Lease)
	apiErr := apiError(t, err)
	if apiErr.StatusCode != 409 || !apiErr.LeaseLost() || !errors.Is(err, rota.ErrLeaseLost) ||
		!errors.Is(err, rota.ErrConflict) || !strings.Contains(apiErr.Message, "lease") {
		t.Fatalf("a second ack: %v", err)
	}
	if got, err := c.GetTask(ctx, task.ID); err != nil || got.Status != rota.TaskSucceeded {
		t.Fatalf("after the stale ack: %+v, %v", got, err)
	}
	runs := runsOf(t, c, task.ID)
	if len(runs) != 1 || runs[0].Status != "succeeded" {
		t.Fatalf("runs %+v", runs)
	}
}

func TestExpiredLeaseIsDeliveredAgain(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	task, err := c.CreateTask(ctx, rota.NewTask{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	first := pullOne(t, c, job, time.Second)
	// Not acked nor extended: the lease expires and the task is delivered again.
	second := pullOne(t, c, job, 0)
	if second.Task != task.ID || second.Attempt != 2 || second.Lease == first.Lease {
		t.Fatalf("redelivered %+v after %+v", second, first)
	}
	if _, err := c.Ack(ctx, first.Task, first.Lease); !errors.Is(err, rota.ErrLeaseLost) {
		t.Fatalf("acking the expired lease: %v", err)
	}
	if _, err := c.Extend(ctx, first.Task, first.Lease, time.Minute); !errors.Is(err, rota.ErrLeaseLost) {
		t.Fatalf("extending the expired lease: %v", err)
	}
	if acked, err := c.Ack(ctx, second.Task, second.Lease); err != nil || acked.Status != rota.TaskSucceeded {
		t.Fatalf("acking the current lease: %+v, %v", acked, err)
	}
}

func TestNackIsRetried(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	task, err := c.CreateTask(ctx, rota.NewTask{Job: job, Payload: "p"})
	if err != nil {
		t.Fatal(err)
	}
	item := pullOne(t, c, job, 0)
	before := time.Now()
	nacked, err := c.NackWithDelay(ctx, item.Task, item.Lease, "warehouse closed", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if nacked.Status != rota.TaskFailed || nacked.Attempts != 1 || nacked.DueAt.Before(before.Add(1400*time.Millisecond)) {
		t.Fatalf("nacked %+v (nacked at %v)", nacked, before)
	}
	// Never delivered before its retry is due.
	early, err := c.Pull(ctx, job, rota.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(early) > 0 && time.Now().Before(nacked.DueAt) {
		t.Fatalf("delivered %+v before its due time %v", early, nacked.DueAt)
	}

	var again rota.Pulled
	if len(early) > 0 {
		again = early[0]
	} else {
		again = pullOne(t, c, job, 0)
	}
	if again.Task != task.ID || again.Attempt != 2 || again.Payload != "p" {
		t.Fatalf("the retry: %+v", again)
	}
	if time.Now().Before(nacked.DueAt) {
		t.Fatalf("the retry came before its due time %v", nacked.DueAt)
	}
	if acked, err := c.Ack(ctx, again.Task, again.Lease); err != nil || acked.Status != rota.TaskSucceeded || acked.Attempts != 2 {
		t.Fatalf("acking the retry: %+v, %v", acked, err)
	}
	runs := runsOf(t, c, task.ID)
	if len(runs) != 2 || runs[0].Status != "failed" || runs[0].Message != "warehouse closed" || runs[1].Status != "succeeded" {
		t.Fatalf("runs %+v", runs)
	}
}

func TestNackOnTheLastAttemptIsDeadAndRetryRevives(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	task, err := c.CreateTask(ctx, rota.NewTask{Job: job, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	item := pullOne(t, c, job, 0)
	if dead, err := c.Nack(ctx, item.Task, item.Lease, "fatal"); err != nil || dead.Status != rota.TaskDead {
		t.Fatalf("nacking the last attempt: %+v, %v", dead, err)
	}

	// Only a dead task can be re-driven.
	pending, err := c.CreateTask(ctx, rota.NewTask{Job: job, Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RetryTask(ctx, pending.ID); !errors.Is(err, rota.ErrConflict) {
		t.Fatalf("re-driving a pending task: %v", err)
	}
	retried, err := c.RetryTask(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if retried.ID != task.ID || retried.Status == rota.TaskDead || retried.Status == rota.TaskSucceeded {
		t.Fatalf("re-driven %+v", retried)
	}
	again := pullOne(t, c, job, 0)
	if again.Task != task.ID || again.Attempt != 2 {
		t.Fatalf("pulled %+v after the re-drive", again)
	}
	if _, err := c.Nack(ctx, again.Task, again.Lease, ""); err != nil {
		t.Fatal(err)
	}
	if n, err := c.RetryDead(ctx, job, 0); err != nil || n != 1 {
		t.Fatalf("re-driving the job's dead tasks: %d, %v", n, err)
	}
	third := pullOne(t, c, job, 0)
	if third.Task != task.ID || third.Attempt != 3 {
		t.Fatalf("pulled %+v after the bulk re-drive", third)
	}
	if _, err := c.Ack(ctx, third.Task, third.Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelTask(ctx, pending.ID); err != nil {
		t.Fatal(err)
	}
}

func TestExtend(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	task, err := c.CreateTask(ctx, rota.NewTask{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	item := pullOne(t, c, job, time.Second)
	until, err := c.Extend(ctx, item.Task, item.Lease, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !until.After(item.LeaseExpiresAt.Add(50 * time.Second)) {
		t.Fatalf("extended to %v from %v", until, item.LeaseExpiresAt)
	}
	_, err = c.Extend(ctx, item.Task, item.Lease, 10*time.Millisecond)
	if apiErr := apiError(t, err); apiErr.StatusCode != 422 || apiErr.Field() != "lease_ms" {
		t.Fatalf("a 10 ms extension: %v", err)
	}
	if acked, err := c.Ack(ctx, item.Task, item.Lease); err != nil || acked.Attempts != 1 {
		t.Fatalf("acking the extended lease: %+v, %v", acked, err)
	}
	if _, err := c.Extend(ctx, task.ID, item.Lease, time.Minute); !errors.Is(err, rota.ErrLeaseLost) {
		t.Fatalf("extending an acked lease: %v", err)
	}
}

func TestAckBatchResults(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	ids, err := c.CreateTasks(ctx, []rota.NewTask{{Job: job, Payload: "0"}, {Job: job, Payload: "1"}, {Job: job, Payload: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	items := pullN(t, c, job, 3, 0)
	if _, err := c.Ack(ctx, items[0].Task, items[0].Lease); err != nil {
		t.Fatal(err)
	}
	acks := append(rota.AckItems(items), rota.AckItem{Task: 999_999_999, Lease: "nope"})
	results, err := c.AckBatch(ctx, job, acks)
	if err != nil {
		t.Fatal(err)
	}
	want := []rota.AckResult{
		{Task: items[0].Task, Status: rota.AckStale},
		{Task: items[1].Task, Status: rota.AckAcked},
		{Task: items[2].Task, Status: rota.AckAcked},
		{Task: 999_999_999, Status: rota.AckNotFound},
	}
	if len(results) != len(want) {
		t.Fatalf("results %+v", results)
	}
	for i := range want {
		if results[i] != want[i] {
			t.Fatalf("results %+v, want %+v", results, want)
		}
	}
	for _, id := range ids {
		if task, err := c.GetTask(ctx, id); err != nil || task.Status != rota.TaskSucceeded {
			t.Fatalf("task %d: %+v, %v", id, task, err)
		}
	}
}
