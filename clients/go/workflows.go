package rota

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// InstanceStatus is where a workflow instance is, or how it ended.
type InstanceStatus string

// The workflow instance statuses of the API.
const (
	// InstanceRunning: some step is pending or running.
	InstanceRunning InstanceStatus = "running"
	// InstanceSucceeded: every step succeeded or was skipped.
	InstanceSucceeded InstanceStatus = "succeeded"
	// InstanceFailed: a step failed and nothing runs any more.
	InstanceFailed InstanceStatus = "failed"
	// InstanceCancelled: cancelled by [Client.CancelInstance].
	InstanceCancelled InstanceStatus = "cancelled"
)

// Instance is a workflow instance as the API shows it (InstanceView).
type Instance struct {
	// ID is the instance's id.
	ID int64 `json:"id"`
	// Workflow is the workflow's id.
	Workflow int64 `json:"workflow"`
	// Version is the workflow's version the instance runs.
	Version int `json:"version"`
	// Status is where the instance is.
	Status InstanceStatus `json:"status"`
	// Input is the instance's input (JSON; "null" when started without one).
	Input json.RawMessage `json:"input"`
	// Output is {"<sink step>": its output, …} once the instance ended; JSON null before.
	Output json.RawMessage `json:"output"`
	// Key is the idempotency key it was started with; "" for none.
	Key string `json:"key"`
	// Steps are the instance's steps, in the workflow's order.
	Steps []InstanceStep `json:"steps"`
	// CreatedAt is when the instance started.
	CreatedAt time.Time `json:"created_at"`
	// FinishedAt is when it ended; nil while it runs.
	FinishedAt *time.Time `json:"finished_at"`

	// Created is true only on the answer of [Client.StartWorkflow] that made the
	// instance (the server's 201); false when the key had started one before (its 200).
	Created bool `json:"-"`
}

// Running tells whether the instance has not ended yet.
func (i *Instance) Running() bool { return i.Status == InstanceRunning }

// DecodeOutput decodes the instance's output into v.
func (i *Instance) DecodeOutput(v any) error { return json.Unmarshal(i.Output, v) }

// InstanceStep is one step of an [Instance] (InstanceStepView).
type InstanceStep struct {
	// Name is the step's name in the workflow.
	Name string `json:"name"`
	// Status is "pending", "running", "succeeded", "failed", "skipped" or "cancelled".
	Status string `json:"status"`
	// Task is the id of the step's task (a mapped step's first element's); 0 before
	// it has one.
	Task int64 `json:"task"`
	// Runs are the ids of every run of the step's tasks, oldest first.
	Runs []int64 `json:"runs"`
	// Output is the step's output (JSON; null before it has one).
	Output json.RawMessage `json:"output"`
	// Items counts a mapped step's elements; nil for another step.
	Items *StepItems `json:"items"`
	// Message says why the step failed, when the workflow says so; "" otherwise.
	Message string `json:"message"`
	// StartedAt is when the step started; nil before.
	StartedAt *time.Time `json:"started_at"`
	// FinishedAt is when the step ended; nil before.
	FinishedAt *time.Time `json:"finished_at"`
}

// StepItems counts a mapped step's elements by outcome.
type StepItems struct {
	// Total is how many elements the step has.
	Total int64 `json:"total"`
	// Succeeded counts the elements whose task succeeded.
	Succeeded int64 `json:"succeeded"`
	// Failed counts the elements whose task failed for good.
	Failed int64 `json:"failed"`
	// Running counts the elements still under way.
	Running int64 `json:"running"`
}

// StartWorkflow starts an instance of workflow (its name or id) with input (any value
// encoded as JSON; nil is null), which every step's payload carries as "input". With a
// key (up to 200 characters; "" for none) that started an instance before, it answers
// that instance with Created false instead of starting another. An unknown workflow is
// an error matching [ErrNotFound]; a disabled one, [ErrConflict].
func (c *Client) StartWorkflow(ctx context.Context, workflow string, input any, key string) (*Instance, error) {
	body := struct {
		Input any    `json:"input"`
		Key   string `json:"key,omitempty"`
	}{input, key}
	var out Instance
	status, err := c.call(ctx, http.MethodPost, apiPath("workflows", workflow, "instances"), body, &out, false)
	if err != nil {
		return nil, err
	}
	out.Created = status == http.StatusCreated
	return &out, nil
}

// GetInstance reads workflow instance id; an unknown id is an error matching
// [ErrNotFound].
func (c *Client) GetInstance(ctx context.Context, id int64) (*Instance, error) {
	var out Instance
	if _, err := c.call(ctx, http.MethodGet, apiPath("workflow-instances", itoa(id)), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// DefaultPoll is how often [Client.WaitInstance] reads the instance when not told.
const DefaultPoll = 250 * time.Millisecond

// WaitInstance reads workflow instance id every poll (0: [DefaultPoll]) until it has
// ended, and answers it then; its Output is the instance's output. Bound the wait with
// ctx: when ctx ends first, the error wraps ctx's (errors.Is(err,
// context.DeadlineExceeded)).
func (c *Client) WaitInstance(ctx context.Context, id int64, poll time.Duration) (*Instance, error) {
	if poll <= 0 {
		poll = DefaultPoll
	}
	for {
		instance, err := c.GetInstance(ctx, id)
		if err != nil {
			return nil, err
		}
		if !instance.Running() {
			return instance, nil
		}
		if !sleep(ctx, poll) {
			return nil, fmt.Errorf("rota: workflow instance %d is still running: %w", id, context.Cause(ctx))
		}
	}
}

// InstanceFilter selects the instances of [Client.ListInstances]; zero fields select
// everything.
type InstanceFilter struct {
	// Workflow keeps the instances of this workflow (its name or id).
	Workflow string
	// Status keeps the instances in this status.
	Status InstanceStatus
	// Limit is the page's size: 0 for the server's 50; more than 1,000 is capped.
	Limit int
	// After is the Next cursor of the previous page.
	After string
}

// InstancePage is one page of [Client.ListInstances], newest first.
type InstancePage struct {
	// Items are the page's instances.
	Items []Instance `json:"items"`
	// Next is the cursor of the next page, to pass back as InstanceFilter.After; "" on
	// the last page.
	Next string `json:"next"`
}

// ListInstances reads one page of the workflow instances that filter selects, newest
// first.
func (c *Client) ListInstances(ctx context.Context, filter InstanceFilter) (*InstancePage, error) {
	q := url.Values{}
	setIf(q, "workflow", filter.Workflow)
	setIf(q, "status", string(filter.Status))
	if filter.Limit != 0 {
		q.Set("limit", strconv.Itoa(filter.Limit))
	}
	setIf(q, "after", filter.After)
	var out InstancePage
	if _, err := c.call(ctx, http.MethodGet, withQuery(apiPath("workflow-instances"), q), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelInstance cancels a running instance: its pending steps are cancelled and its
// running ones killed. An instance that has ended is an error matching [ErrConflict].
func (c *Client) CancelInstance(ctx context.Context, id int64) (*Instance, error) {
	return c.instanceAction(ctx, id, "cancel")
}

// RetryInstance runs a failed instance's failed steps again (a fresh attempt budget);
// an instance that has not failed is an error matching [ErrConflict].
func (c *Client) RetryInstance(ctx context.Context, id int64) (*Instance, error) {
	return c.instanceAction(ctx, id, "retry")
}

func (c *Client) instanceAction(ctx context.Context, id int64, action string) (*Instance, error) {
	var out Instance
	if _, err := c.call(ctx, http.MethodPost, apiPath("workflow-instances", itoa(id), action), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}
