package rota_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rota "github.com/rota-scheduler/rota/clients/go"
)

func TestCreateGetCancel(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)

	first, err := c.CreateTask(ctx, rota.NewTask{
		Job:      job,
		Payload:  map[string]int{"order_id": 42},
		Delay:    time.Minute,
		Key:      "order-42",
		Priority: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created || first.Status != rota.TaskPending || first.Key != "order-42" ||
		first.Payload != `{"order_id":42}` || first.Priority != 5 || first.Attempts != 0 || first.Kind != "delayed" {
		t.Fatalf("created %+v", first)
	}
	if !first.DueAt.After(first.CreatedAt.Add(50 * time.Second)) {
		t.Fatalf("due %v, created %v: not a minute later", first.DueAt, first.CreatedAt)
	}

	// The same key answers the first task (200), whatever else differs.
	again, err := c.CreateTask(ctx, rota.NewTask{Job: job, Payload: "other", Delay: time.Millisecond, Key: "order-42"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Created || again.ID != first.ID || again.Payload != `{"order_id":42}` {
		t.Fatalf("the key's task again: %+v", again)
	}

	read, err := c.GetTask(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if read.ID != first.ID || read.Status != rota.TaskPending || read.Created || !read.DueAt.Equal(first.DueAt) {
		t.Fatalf("read %+v", read)
	}

	cancelled, err := c.CancelTask(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.Status != rota.TaskCancelled {
		t.Fatalf("cancelled %+v", cancelled)
	}
	if read, err = c.GetTask(ctx, first.ID); err != nil || read.Status != rota.TaskCancelled {
		t.Fatalf("after cancel: %+v, %v", read, err)
	}
	// Cancelling a cancelled task is idempotent.
	if again, err = c.CancelTask(ctx, first.ID); err != nil || again.Status != rota.TaskCancelled {
		t.Fatalf("cancelling again: %+v, %v", again, err)
	}
	// A cancelled task is never delivered.
	if items, err := c.Pull(ctx, job, rota.PullOptions{}); err != nil || len(items) != 0 {
		t.Fatalf("pulled %+v, %v", items, err)
	}
}

func TestCreateByJobIDAtATimeAndCancelByKey(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	var info struct {
		ID int64 `json:"id"`
	}
	if err := c.Do(ctx, http.MethodGet, "/api/v1/jobs/"+job, nil, &info); err != nil {
		t.Fatal(err)
	}

	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	task, err := c.CreateTask(ctx, rota.NewTask{
		JobID:       info.ID,
		RunAt:       at,
		Key:         "by-id",
		MaxAttempts: 3,
		Payload:     json.RawMessage(`{"raw":true}`),
		Backoff:     rota.ExponentialBackoff(time.Second, 2, time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	if task.Job != info.ID || !task.DueAt.Equal(at) || task.MaxAttempts != 3 || task.Payload != `{"raw":true}` {
		t.Fatalf("created %+v, want job %d due %v", task, info.ID, at)
	}

	cancelled, err := c.CancelTaskByKey(ctx, job, "by-id")
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.ID != task.ID || cancelled.Status != rota.TaskCancelled {
		t.Fatalf("cancelled by key: %+v", cancelled)
	}
	_, err = c.CancelTaskByKey(ctx, job, "no-such-key")
	if !errors.Is(err, rota.ErrNotFound) {
		t.Fatalf("cancelling an unknown key: %v", err)
	}
}

func TestBatch(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	existing, err := c.CreateTask(ctx, rota.NewTask{Job: job, Delay: time.Minute, Key: "b-existing"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.CreateTasks(ctx, []rota.NewTask{
		{Job: job, Payload: "one", Key: "b-1"},
		{Job: job, Payload: "two", Priority: 7, Backoff: rota.FixedBackoff(300 * time.Millisecond)},
		{Job: job, Key: "b-existing"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 || ids[2] != existing.ID || ids[0] == ids[1] || ids[0] == existing.ID {
		t.Fatalf("ids %v (existing %d)", ids, existing.ID)
	}
	if one, err := c.GetTask(ctx, ids[0]); err != nil || one.Payload != "one" || one.Key != "b-1" {
		t.Fatalf("first item: %+v, %v", one, err)
	}
	if two, err := c.GetTask(ctx, ids[1]); err != nil || two.Priority != 7 {
		t.Fatalf("second item: %+v, %v", two, err)
	}

	// All or nothing: the same key twice is a 422 naming the second item's key, and
	// neither item was created.
	_, err = c.CreateTasks(ctx, []rota.NewTask{{Job: job, Key: "dup"}, {Job: job, Key: "dup"}})
	apiErr := apiError(t, err)
	if apiErr.StatusCode != 422 || !errors.Is(err, rota.ErrInvalid) || apiErr.Field() != "tasks[1].key" {
		t.Fatalf("duplicate keys: %v (field %q)", err, apiErr.Field())
	}
	page, err := c.ListTasks(ctx, rota.TaskFilter{Job: job, Key: "dup"})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("a refused batch created %+v (%v)", page, err)
	}
	// An invalid item names its index.
	_, err = c.CreateTasks(ctx, []rota.NewTask{{Job: job}, {Job: job, Priority: -5000}})
	if f := apiError(t, err).Field(); f != "tasks[1].priority" {
		t.Fatalf("bad priority in a batch: %v (field %q)", err, f)
	}

	// Both due ones come, higher priority first; one batch ack acks both.
	pulled := pullN(t, c, job, 2, 0)
	if pulled[0].Task != ids[1] || pulled[1].Task != ids[0] {
		t.Fatalf("pulled %+v, want %d then %d", pulled, ids[1], ids[0])
	}
	results, err := c.AckBatch(ctx, job, rota.AckItems(pulled))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || !results[0].Acked() || !results[1].Acked() {
		t.Fatalf("batch ack: %+v", results)
	}
	for _, id := range ids[:2] {
		if task, err := c.GetTask(ctx, id); err != nil || task.Status != rota.TaskSucceeded {
			t.Fatalf("task %d after the batch ack: %+v, %v", id, task, err)
		}
	}
	if _, err := c.CancelTask(ctx, existing.ID); err != nil {
		t.Fatal(err)
	}
}

func TestListTasksPages(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	ids, err := c.CreateTasks(ctx, []rota.NewTask{
		{Job: job, Delay: time.Hour, Key: "l-1"},
		{Job: job, Delay: time.Hour, Key: "l-2"},
		{Job: job, Delay: time.Hour, Key: "l-3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelTask(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}

	var seen []int64
	filter := rota.TaskFilter{Job: job, Status: rota.TaskPending, Limit: 1}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("the cursor never ended: %v", seen)
		}
		page, err := c.ListTasks(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range page.Items {
			if task.Status != rota.TaskPending {
				t.Fatalf("status filter let %+v through", task)
			}
			seen = append(seen, task.ID)
		}
		if page.Next == "" {
			break
		}
		filter.After = page.Next
	}
	// Newest first, the cancelled one left out.
	if fmt.Sprint(seen) != fmt.Sprint([]int64{ids[2], ids[1]}) {
		t.Fatalf("listed %v, want [%d %d]", seen, ids[2], ids[1])
	}

	byKey, err := c.ListTasks(ctx, rota.TaskFilter{Job: job, Key: "l-2"})
	if err != nil || len(byKey.Items) != 1 || byKey.Items[0].ID != ids[1] {
		t.Fatalf("by key: %+v, %v", byKey, err)
	}
	due, err := c.ListTasks(ctx, rota.TaskFilter{Job: job, DueBefore: time.Now().Add(30 * time.Minute)})
	if err != nil || len(due.Items) != 0 {
		t.Fatalf("due within 30 minutes: %+v, %v", due, err)
	}

	_, err = c.ListTasks(ctx, rota.TaskFilter{Status: "bogus"})
	if apiErr := apiError(t, err); apiErr.StatusCode != 400 || apiErr.Field() != "status" {
		t.Fatalf("a bad status filter: %v (field %q)", err, apiErr.Field())
	}
}

func TestErrors(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)

	// A value out of range: 422, naming the field.
	_, err := c.CreateTask(ctx, rota.NewTask{Job: job, Priority: 5000})
	apiErr := apiError(t, err)
	if apiErr.StatusCode != http.StatusUnprocessableEntity || !errors.Is(err, rota.ErrInvalid) ||
		apiErr.Field() != "priority" || !strings.Contains(apiErr.Message, "5000") {
		t.Fatalf("priority 5000: %v (field %q)", err, apiErr.Field())
	}
	if !strings.Contains(err.Error(), "POST /api/v1/tasks") || !strings.Contains(err.Error(), "422") {
		t.Fatalf("the error's text: %q", err.Error())
	}
	if !strings.Contains(string(apiErr.Body), `"error"`) {
		t.Fatalf("the error's body: %s", apiErr.Body)
	}
	// Both delay and run_at.
	_, err = c.CreateTask(ctx, rota.NewTask{Job: job, Delay: 5 * time.Millisecond, RunAt: time.Now()})
	if f := apiError(t, err).Field(); f != "delay_ms" || !errors.Is(err, rota.ErrInvalid) {
		t.Fatalf("delay and run_at: %v (field %q)", err, f)
	}
	// Pull options out of range.
	_, err = c.Pull(ctx, job, rota.PullOptions{Lease: 10 * time.Millisecond})
	if f := apiError(t, err).Field(); f != "lease_ms" {
		t.Fatalf("a 10 ms lease: %v (field %q)", err, f)
	}
	_, err = c.Pull(ctx, job, rota.PullOptions{Max: 5000})
	if f := apiError(t, err).Field(); f != "max" {
		t.Fatalf("max 5000: %v (field %q)", err, f)
	}

	// 404s: an unknown task, job, workflow; not a 409.
	_, err = c.GetTask(ctx, 999_999_999)
	apiErr = apiError(t, err)
	if apiErr.StatusCode != 404 || !errors.Is(err, rota.ErrNotFound) || errors.Is(err, rota.ErrConflict) ||
		!strings.Contains(apiErr.Message, "999999999") || apiErr.Field() != "" {
		t.Fatalf("an unknown task: %v", err)
	}
	_, err = c.Pull(ctx, "no-such-job", rota.PullOptions{})
	if !errors.Is(err, rota.ErrNotFound) || !strings.Contains(apiError(t, err).Message, "no-such-job") {
		t.Fatalf("an unknown job: %v", err)
	}
	_, err = c.CreateTask(ctx, rota.NewTask{Job: "no-such-job"})
	if !errors.Is(err, rota.ErrNotFound) || apiError(t, err).Field() != "job" {
		t.Fatalf("a task of an unknown job: %v", err)
	}
	_, err = c.Ack(ctx, 999_999_999, "lease")
	if !errors.Is(err, rota.ErrNotFound) || errors.Is(err, rota.ErrLeaseLost) {
		t.Fatalf("acking an unknown task: %v", err)
	}

	// 409: cancelling a running task; a conflict, but no lease was involved.
	task, err := c.CreateTask(ctx, rota.NewTask{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	item := pullOne(t, c, job, 0)
	_, err = c.CancelTask(ctx, task.ID)
	apiErr = apiError(t, err)
	if apiErr.StatusCode != 409 || !errors.Is(err, rota.ErrConflict) || errors.Is(err, rota.ErrLeaseLost) ||
		!strings.Contains(apiErr.Message, "running") {
		t.Fatalf("cancelling a running task: %v", err)
	}
	if _, err := c.Ack(ctx, item.Task, item.Lease); err != nil {
		t.Fatal(err)
	}

	// 401: a wrong token.
	intruder, err := rota.NewClient(serverURL, "wrong-token")
	if err != nil {
		t.Fatal(err)
	}
	_, err = intruder.GetTask(ctx, task.ID)
	if apiErr := apiError(t, err); apiErr.StatusCode != 401 || !errors.Is(err, rota.ErrUnauthorized) || apiErr.Message == "" {
		t.Fatalf("a wrong token: %v", err)
	}

	// No answer at all is not an APIError.
	closed, err := rota.NewClient("http://127.0.0.1:1", token)
	if err != nil {
		t.Fatal(err)
	}
	_, err = closed.GetTask(ctx, 1)
	var notAPI *rota.APIError
	if err == nil || errors.As(err, &notAPI) {
		t.Fatalf("a refused connection: %v", err)
	}

	// A base URL that is not one.
	if _, err := rota.NewClient("127.0.0.1:8080", token); err == nil {
		t.Fatal("a URL without a scheme was taken")
	}
}
