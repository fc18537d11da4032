package rota

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// PullOptions says how [Client.Pull] leases tasks; zero fields are the server's
// defaults (one task, a 30 s lease, no wait).
type PullOptions struct {
	// Max is how many tasks at most, 1 to 1,000; 0 for 1.
	Max int
	// Lease is how long the consumer holds each task before it is delivered again
	// (1 s to 12 h); 0 for 30 s. Extend it with [Client.Extend] while working.
	Lease time.Duration
	// Wait is how long the pull waits for a task to fall due when none is ready (up to
	// 30 s, a long poll); 0 answers at once.
	Wait time.Duration
	// Consumer names this consumer; its runs show executor "pull:<Consumer>".
	Consumer string
}

// pullFields is PullOptions as the API reads it (PullFields).
type pullFields struct {
	Max      int    `json:"max,omitempty"`
	LeaseMs  int64  `json:"lease_ms,omitempty"`
	WaitMs   int64  `json:"wait_ms,omitempty"`
	Consumer string `json:"consumer,omitempty"`
}

// Pulled is a task handed to this consumer by a pull, with its lease (PulledTask).
type Pulled struct {
	// Task is the task's id.
	Task int64 `json:"task"`
	// Attempt is the attempt's number, from 1; a later attempt of the same task is a
	// redelivery of the same work.
	Attempt int `json:"attempt"`
	// Lease is the token to give back to ack, nack or extend; only the current lease's
	// holder can.
	Lease string `json:"lease"`
	// Payload is the task's payload; "" for none. A workflow step's is the JSON document
	// {"input": …, "steps": {"<predecessor>": its output, …}}.
	Payload string `json:"payload"`
	// Key is the task's idempotency key; "" for none.
	Key string `json:"key"`
	// Priority is the task's priority.
	Priority int `json:"priority"`
	// DueAt is the attempt's due time.
	DueAt time.Time `json:"due_at"`
	// LeaseExpiresAt is when the lease ends unless extended (the server checks expiry
	// every second, so it ends within a second after).
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
}

// DecodePayload decodes the payload as JSON into v.
func (p Pulled) DecodePayload(v any) error {
	return json.Unmarshal([]byte(p.Payload), v)
}

// Pull leases up to opts.Max due tasks of the pull job job (its name or id), higher
// priority first, then earlier due. With opts.Wait it waits that long for one to fall
// due when none is ready; no items (and no error) means none did. A job that is not
// delivered by pull is an error matching [ErrConflict].
func (c *Client) Pull(ctx context.Context, job string, opts PullOptions) ([]Pulled, error) {
	body := pullFields{
		Max:      opts.Max,
		LeaseMs:  millis(opts.Lease),
		WaitMs:   millis(opts.Wait),
		Consumer: opts.Consumer,
	}
	var out struct {
		Items []Pulled `json:"items"`
	}
	if _, err := c.call(ctx, http.MethodPost, apiPath("jobs", job, "pull"), body, &out, false); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// Ack ends the attempt as succeeded: the task is [TaskSucceeded]. A lease that is no
// longer the task's is an error matching [ErrLeaseLost] (and [ErrConflict]) and changes
// nothing.
func (c *Client) Ack(ctx context.Context, task int64, lease string) (*Task, error) {
	return c.AckWithOutput(ctx, task, lease, nil)
}

// AckWithOutput acks like [Client.Ack], giving the attempt's output: any value encoded
// as JSON (a json.RawMessage as it is; nil sends none), at most 64 KiB. For a workflow
// step's task it is the step's output, given to the steps after it.
func (c *Client) AckWithOutput(ctx context.Context, task int64, lease string, output any) (*Task, error) {
	body := struct {
		Lease  string `json:"lease"`
		Output any    `json:"output,omitempty"`
	}{lease, output}
	return c.endAttempt(ctx, task, "ack", body)
}

// Nack ends the attempt as failed, with reason kept as the run's message ("" for none):
// the task is retried after its backoff while attempts remain ([TaskFailed]), else it is
// [TaskDead]. A stale lease is an error matching [ErrLeaseLost].
func (c *Client) Nack(ctx context.Context, task int64, lease, reason string) (*Task, error) {
	return c.nack(ctx, task, lease, reason, nil)
}

// NackWithDelay nacks like [Client.Nack], retrying after delay (0: at once; at most 7
// days) instead of the backoff.
func (c *Client) NackWithDelay(ctx context.Context, task int64, lease, reason string, delay time.Duration) (*Task, error) {
	ms := millis(delay)
	return c.nack(ctx, task, lease, reason, &ms)
}

func (c *Client) nack(ctx context.Context, task int64, lease, reason string, delayMs *int64) (*Task, error) {
	body := struct {
		Lease   string `json:"lease"`
		Error   string `json:"error,omitempty"`
		DelayMs *int64 `json:"delay_ms,omitempty"`
	}{lease, reason, delayMs}
	return c.endAttempt(ctx, task, "nack", body)
}

// endAttempt is POST /tasks/{task}/{verb} (ack, nack) with body.
func (c *Client) endAttempt(ctx context.Context, task int64, verb string, body any) (*Task, error) {
	var out Task
	if _, err := c.call(ctx, http.MethodPost, apiPath("tasks", itoa(task), verb), body, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Extend makes the lease end duration from now (1 s to 12 h) and answers the new end. A
// stale lease is an error matching [ErrLeaseLost].
func (c *Client) Extend(ctx context.Context, task int64, lease string, duration time.Duration) (time.Time, error) {
	body := struct {
		Lease   string `json:"lease"`
		LeaseMs int64  `json:"lease_ms"`
	}{lease, millis(duration)}
	var out struct {
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	}
	if _, err := c.call(ctx, http.MethodPost, apiPath("tasks", itoa(task), "extend"), body, &out, true); err != nil {
		return time.Time{}, err
	}
	return out.LeaseExpiresAt, nil
}

// AckItem is one ack of [Client.AckBatch].
type AckItem struct {
	// Task is the pulled task's id.
	Task int64 `json:"task"`
	// Lease is the pull's lease.
	Lease string `json:"lease"`
	// Output is the attempt's output (see [Client.AckWithOutput]); nil for none.
	Output any `json:"output,omitempty"`
}

// AckItems makes an AckItem (without output) of each pulled task.
func AckItems(pulled []Pulled) []AckItem {
	items := make([]AckItem, len(pulled))
	for i, p := range pulled {
		items[i] = AckItem{Task: p.Task, Lease: p.Lease}
	}
	return items
}

// What became of one ack of [Client.AckBatch] ([AckResult.Status]).
const (
	// AckAcked: the task succeeded.
	AckAcked = "acked"
	// AckStale: the lease is not the task's current one (it expired, or the attempt
	// ended); nothing changed.
	AckStale = "stale"
	// AckNotFound: the job has no such task.
	AckNotFound = "not_found"
)

// AckResult is what became of one ack of [Client.AckBatch].
type AckResult struct {
	// Task is the task's id.
	Task int64 `json:"task"`
	// Status is [AckAcked], [AckStale] or [AckNotFound].
	Status string `json:"status"`
}

// Acked tells whether the ack took effect.
func (r AckResult) Acked() bool { return r.Status == AckAcked }

// AckBatch acks up to 1,000 leases of job's tasks at once and answers what became of
// each, in order. A stale lease or an unknown task is a result, not an error.
func (c *Client) AckBatch(ctx context.Context, job string, acks []AckItem) ([]AckResult, error) {
	if acks == nil {
		acks = []AckItem{}
	}
	body := struct {
		Acks []AckItem `json:"acks"`
	}{acks}
	var out struct {
		Results []AckResult `json:"results"`
	}
	if _, err := c.call(ctx, http.MethodPost, apiPath("jobs", job, "ack"), body, &out, false); err != nil {
		return nil, err
	}
	return out.Results, nil
}
