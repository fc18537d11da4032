package rota_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	rota "github.com/rota-scheduler/rota/clients/go"
)

// createWorkflow creates a workflow of app shop whose steps run job, as the Python and
// Rust clients' tests do.
func createWorkflow(t *testing.T, c *rota.Client, name string, steps ...map[string]any) {
	t.Helper()
	var created struct {
		ID      int64 `json:"id"`
		Version int   `json:"version"`
	}
	body := map[string]any{"name": name, "app": "shop", "steps": steps}
	if err := c.Do(testContext(t), http.MethodPost, "/api/v1/workflows", body, &created); err != nil {
		t.Fatal(err)
	}
	if created.ID == 0 || created.Version != 1 {
		t.Fatalf("created workflow %+v", created)
	}
}

// stepPayload is a workflow step's task payload.
type stepPayload struct {
	Input struct {
		Order int `json:"order"`
	} `json:"input"`
	Steps map[string]json.RawMessage `json:"steps"`
}

func TestWorkflowStartedAndItsOutputAwaited(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	name := "wf-" + job
	createWorkflow(t, c, name, map[string]any{"name": "close", "job": job})

	started, err := c.StartWorkflow(ctx, name, map[string]int{"order": 42}, "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if !started.Created || !started.Running() || started.Key != "order-42" || len(started.Steps) != 1 {
		t.Fatalf("started %+v", started)
	}
	again, err := c.StartWorkflow(ctx, name, map[string]int{"order": 43}, "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if again.Created || again.ID != started.ID || string(again.Input) != `{"order":42}` {
		t.Fatalf("the key's instance again: %+v (input %s)", again, again.Input)
	}

	waited := make(chan *rota.Instance, 1)
	waitErr := make(chan error, 1)
	go func() {
		waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		instance, err := c.WaitInstance(waitCtx, started.ID, 100*time.Millisecond)
		waited <- instance
		waitErr <- err
	}()

	item := pullOne(t, c, job, 0)
	var payload stepPayload
	if err := item.DecodePayload(&payload); err != nil || payload.Input.Order != 42 || len(payload.Steps) != 0 {
		t.Fatalf("the step's payload %q: %+v, %v", item.Payload, payload, err)
	}
	if _, err := c.AckWithOutput(ctx, item.Task, item.Lease, map[string]int{"closed": 42}); err != nil {
		t.Fatal(err)
	}

	done := <-waited
	if err := <-waitErr; err != nil {
		t.Fatal(err)
	}
	var output map[string]map[string]int
	if err := done.DecodeOutput(&output); err != nil {
		t.Fatal(err)
	}
	if done.Status != rota.InstanceSucceeded || output["close"]["closed"] != 42 || done.FinishedAt == nil {
		t.Fatalf("finished %+v, output %s", done, done.Output)
	}
	if step := done.Steps[0]; step.Name != "close" || step.Status != "succeeded" || step.Task != item.Task ||
		string(step.Output) != `{"closed":42}` || len(step.Runs) != 1 {
		t.Fatalf("the step: %+v (output %s)", step, step.Output)
	}

	// A wait bounded by its context, then a cancel.
	other, err := c.StartWorkflow(ctx, name, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if string(other.Input) != "null" {
		t.Fatalf("input without one: %s", other.Input)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.WaitInstance(short, other.ID, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a running instance past the deadline: %v", err)
	}
	cancelled, err := c.CancelInstance(ctx, other.ID)
	if err != nil || cancelled.Status != rota.InstanceCancelled {
		t.Fatalf("cancelling: %+v, %v", cancelled, err)
	}
	if _, err := c.CancelInstance(ctx, other.ID); !errors.Is(err, rota.ErrConflict) {
		t.Fatalf("cancelling an ended instance: %v", err)
	}
	page, err := c.ListInstances(ctx, rota.InstanceFilter{Workflow: name})
	if err != nil || len(page.Items) != 2 || page.Items[0].ID != other.ID || page.Items[1].ID != started.ID {
		t.Fatalf("instances: %+v, %v", page, err)
	}

	if _, err := c.StartWorkflow(ctx, "no-such-workflow", nil, ""); !errors.Is(err, rota.ErrNotFound) {
		t.Fatalf("starting an unknown workflow: %v", err)
	}
	if _, err := c.GetInstance(ctx, 999_999_999); !errors.Is(err, rota.ErrNotFound) {
		t.Fatalf("reading an unknown instance: %v", err)
	}
}

// A consumer's outputs feed the next step: reserve → close, both steps on one pull job.
func TestConsumeWithOutputFeedsTheNextStep(t *testing.T) {
	c, job, ctx := newClient(t), newJob(t), testContext(t)
	name := "wf2-" + job
	createWorkflow(t, c, name,
		map[string]any{"name": "reserve", "job": job},
		map[string]any{"name": "close", "job": job, "after": []string{"reserve"}},
	)
	started, err := c.StartWorkflow(ctx, name, map[string]int{"order": 7}, "")
	if err != nil {
		t.Fatal(err)
	}

	consumeCtx, stop := context.WithCancel(ctx)
	defer stop()
	consumed := make(chan error, 1)
	go func() {
		consumed <- c.ConsumeWithOutput(consumeCtx, job, func(_ context.Context, item rota.Pulled) (any, error) {
			var payload stepPayload
			if err := item.DecodePayload(&payload); err != nil {
				return nil, err
			}
			reserved, ok := payload.Steps["reserve"]
			if !ok {
				return map[string]int{"reserved": payload.Input.Order}, nil
			}
			var r struct {
				Reserved int `json:"reserved"`
			}
			if err := json.Unmarshal(reserved, &r); err != nil {
				return nil, err
			}
			return map[string]int{"closed": r.Reserved}, nil
		}, rota.ConsumeOptions{Consumer: "steps", Wait: time.Second})
	}()

	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	done, err := c.WaitInstance(waitCtx, started.ID, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-consumed; err != nil {
		t.Fatalf("ConsumeWithOutput: %v", err)
	}
	if done.Status != rota.InstanceSucceeded || string(done.Output) != `{"close":{"closed":7}}` {
		t.Fatalf("finished %+v, output %s", done, done.Output)
	}
	if len(done.Steps) != 2 || string(done.Steps[0].Output) != `{"reserved":7}` {
		t.Fatalf("steps %+v", done.Steps)
	}
}
