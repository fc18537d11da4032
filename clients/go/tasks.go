package rota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"
)

// TaskStatus is where a task is: [TaskPending], [TaskThrottled], [TaskRunning],
// [TaskSucceeded], [TaskFailed] (a retry is due), [TaskDead] (no retry) or
// [TaskCancelled].
type TaskStatus string

// The task statuses of the API.
const (
	// TaskPending: waiting for its due time (or, for a pull job, for a consumer).
	TaskPending TaskStatus = "pending"
	// TaskThrottled: due, but held back by the job's concurrency or rate limit; it
	// spends no attempt while it waits.
	TaskThrottled TaskStatus = "throttled"
	// TaskRunning: an attempt runs (for a pull job: a consumer holds its lease).
	TaskRunning TaskStatus = "running"
	// TaskSucceeded: an attempt succeeded (for a pull job: it was acked).
	TaskSucceeded TaskStatus = "succeeded"
	// TaskFailed: an attempt failed and the next one is due at DueAt.
	TaskFailed TaskStatus = "failed"
	// TaskDead: the last attempt failed; [Client.RetryTask] re-drives it.
	TaskDead TaskStatus = "dead"
	// TaskCancelled: cancelled before it started; it never runs.
	TaskCancelled TaskStatus = "cancelled"
)

// Task is a task as the API shows it (the OpenAPI schema TaskView): one delayed,
// manual, cron, child or workflow-step execution of a job.
type Task struct {
	// ID is the task's id.
	ID int64 `json:"id"`
	// Job is the id of the task's job.
	Job int64 `json:"job"`
	// Kind is what created the task: "delayed", "manual", "cron", "child" or "step".
	Kind string `json:"kind"`
	// Status is where the task is.
	Status TaskStatus `json:"status"`
	// DueAt is the current attempt's due time.
	DueAt time.Time `json:"due_at"`
	// Attempts is how many attempts started so far.
	Attempts int `json:"attempts"`
	// MaxAttempts is the task's own attempt budget; 0 when it uses its job's.
	MaxAttempts int `json:"max_attempts"`
	// Key is the idempotency key it was created with; "" for none.
	Key string `json:"key"`
	// Priority is from -1000 to 1000, higher first.
	Priority int `json:"priority"`
	// Payload is the run's input as created; "" for none.
	Payload string `json:"payload"`
	// LastRunID is the id of its latest run (GET /api/v1/runs/{id}); 0 before the first.
	LastRunID int64 `json:"last_run_id"`
	// CreatedAt is when it was created.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when it last changed.
	UpdatedAt time.Time `json:"updated_at"`

	// Created is true only on the answer of [Client.CreateTask] that made the task (the
	// server's 201); false when the job already had a task with the key (its 200), and
	// on every other answer.
	Created bool `json:"-"`
}

// Backoff is how long a failed attempt waits before the next: make one with
// [FixedBackoff] or [ExponentialBackoff].
type Backoff struct {
	// Kind is "fixed" or "exponential".
	Kind string
	// Delay is a fixed backoff's wait.
	Delay time.Duration
	// Base, Factor and Max make an exponential backoff's wait: Base × Factor^(attempt−1),
	// at most Max.
	Base time.Duration
	// Factor is an exponential backoff's growth per attempt (1 to 100).
	Factor float64
	// Max caps an exponential backoff's wait.
	Max time.Duration
	// Jitter randomises each exponential wait.
	Jitter bool
}

// FixedBackoff waits delay before every retry.
func FixedBackoff(delay time.Duration) *Backoff {
	return &Backoff{Kind: "fixed", Delay: delay}
}

// ExponentialBackoff waits base × factor^(attempt−1) before a retry, at most maxDelay ("1 min,
// then 2, then 4" is ExponentialBackoff(time.Minute, 2, time.Hour)).
func ExponentialBackoff(base time.Duration, factor float64, maxDelay time.Duration) *Backoff {
	return &Backoff{Kind: "exponential", Base: base, Factor: factor, Max: maxDelay}
}

// MarshalJSON writes the API's shape of the backoff's kind.
func (b Backoff) MarshalJSON() ([]byte, error) {
	switch b.Kind {
	case "fixed":
		return json.Marshal(map[string]any{"kind": b.Kind, "delay_ms": millis(b.Delay)})
	case "exponential":
		return json.Marshal(map[string]any{
			"kind": b.Kind, "base_ms": millis(b.Base), "factor": b.Factor,
			"max_ms": millis(b.Max), "jitter": b.Jitter,
		})
	}
	return nil, fmt.Errorf("rota: backoff kind %q is neither fixed nor exponential", b.Kind)
}

// NewTask is a task to create with [Client.CreateTask] or [Client.CreateTasks]. Only Job
// (or JobID) is required; a zero field is left to the server's default.
type NewTask struct {
	// Job is the job's name.
	Job string
	// JobID names the job by id instead of Job. (The API reads a name given as a string
	// as a name even if it is all digits; an id must be sent as a number.)
	JobID int64
	// Payload is the run's input, which the API keeps as UTF-8 text: a string is sent as
	// it is, a []byte or json.RawMessage as its text (it must be UTF-8), and any other
	// value (a struct, a map) as its JSON encoding. nil sends none. At most 64 KiB by
	// default (more is a 413).
	Payload any
	// Delay makes the task due this long after the server accepts it; not with RunAt.
	// Neither means now.
	Delay time.Duration
	// RunAt makes the task due at this time (in the past: now); not with Delay.
	RunAt time.Time
	// Key deduplicates: creating a task with a key the job already has answers that task
	// (with Created false) instead of a new one.
	Key string
	// MaxAttempts is the attempt budget, 1 to 100; 0 uses the job's.
	MaxAttempts int
	// Priority is from -1000 to 1000, higher first; 0 by default.
	Priority int
	// Backoff is the wait between attempts; nil uses the job's.
	Backoff *Backoff
}

// taskFields is NewTask as the API reads it (the OpenAPI schema TaskFields).
type taskFields struct {
	Job         any      `json:"job"`
	Payload     *string  `json:"payload,omitempty"`
	DelayMs     *int64   `json:"delay_ms,omitempty"`
	RunAt       string   `json:"run_at,omitempty"`
	Key         string   `json:"key,omitempty"`
	MaxAttempts int      `json:"max_attempts,omitempty"`
	Priority    int      `json:"priority,omitempty"`
	Backoff     *Backoff `json:"backoff,omitempty"`
}

// MarshalJSON writes the task as the API's create body (TaskFields).
func (t NewTask) MarshalJSON() ([]byte, error) {
	payload, err := payloadText(t.Payload)
	if err != nil {
		return nil, err
	}
	fields := taskFields{
		Job:         t.Job,
		Payload:     payload,
		Key:         t.Key,
		MaxAttempts: t.MaxAttempts,
		Priority:    t.Priority,
		Backoff:     t.Backoff,
	}
	if t.JobID != 0 {
		fields.Job = t.JobID
	}
	if t.Delay != 0 {
		ms := millis(t.Delay)
		fields.DelayMs = &ms
	}
	if !t.RunAt.IsZero() {
		fields.RunAt = formatTime(t.RunAt)
	}
	return json.Marshal(fields)
}

// payloadText is a NewTask's Payload as the API's payload string (nil for none).
func payloadText(payload any) (*string, error) {
	var text string
	switch p := payload.(type) {
	case nil:
		return nil, nil
	case string:
		text = p
	case json.RawMessage:
		text = string(p)
	case []byte:
		text = string(p)
	default:
		data, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("rota: encoding the payload as JSON: %w", err)
		}
		text = string(data)
	}
	if !utf8.ValidString(text) {
		return nil, errors.New("rota: a payload must be UTF-8 text")
	}
	return &text, nil
}

// CreateTask creates a task. With a Key the job already has, it answers the existing
// task with Created false (the server's 200) instead of a new one.
func (c *Client) CreateTask(ctx context.Context, task NewTask) (*Task, error) {
	var out Task
	status, err := c.call(ctx, http.MethodPost, apiPath("tasks"), task, &out, false)
	if err != nil {
		return nil, err
	}
	out.Created = status == http.StatusCreated
	return &out, nil
}

// CreateTasks creates up to 10,000 tasks at once, all or nothing, and answers their ids
// in the order given (for an item whose Key the job already has, that task's id). An
// invalid item fails the whole batch; the error's Field names it ("tasks[3].priority").
func (c *Client) CreateTasks(ctx context.Context, tasks []NewTask) ([]int64, error) {
	if tasks == nil {
		tasks = []NewTask{}
	}
	var out struct {
		IDs []int64 `json:"ids"`
	}
	body := struct {
		Tasks []NewTask `json:"tasks"`
	}{tasks}
	if _, err := c.call(ctx, http.MethodPost, apiPath("tasks", "batch"), body, &out, false); err != nil {
		return nil, err
	}
	return out.IDs, nil
}

// GetTask reads task id; an unknown id is an error matching [ErrNotFound].
func (c *Client) GetTask(ctx context.Context, id int64) (*Task, error) {
	var out Task
	if _, err := c.call(ctx, http.MethodGet, apiPath("tasks", itoa(id)), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelTask cancels a task that has not started, even one already in a scheduler's
// wheel; it then never runs. Cancelling a cancelled task answers it again; a running or
// finished one is an error matching [ErrConflict].
func (c *Client) CancelTask(ctx context.Context, id int64) (*Task, error) {
	var out Task
	if _, err := c.call(ctx, http.MethodDelete, apiPath("tasks", itoa(id)), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelTaskByKey cancels the task of job (its name or id) created with key, as
// [Client.CancelTask] does.
func (c *Client) CancelTaskByKey(ctx context.Context, job, key string) (*Task, error) {
	var out Task
	path := withQuery(apiPath("tasks"), url.Values{"job": {job}, "key": {key}})
	if _, err := c.call(ctx, http.MethodDelete, path, nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// RetryTask re-drives a dead task: a new attempt, due now (the answer shows it
// [TaskFailed], as every task whose retry is due). A task that is not dead is an error
// matching [ErrConflict].
func (c *Client) RetryTask(ctx context.Context, id int64) (*Task, error) {
	var out Task
	if _, err := c.call(ctx, http.MethodPost, apiPath("tasks", itoa(id), "retry"), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// RetryDead re-drives up to limit (0: the server's 1,000; at most 10,000) of the dead
// tasks of job (its name), oldest due first, and answers how many.
func (c *Client) RetryDead(ctx context.Context, job string, limit int) (int, error) {
	body := struct {
		Job    string `json:"job"`
		Status string `json:"status"`
		Limit  int    `json:"limit,omitempty"`
	}{job, string(TaskDead), limit}
	var out struct {
		Retried int `json:"retried"`
	}
	if _, err := c.call(ctx, http.MethodPost, apiPath("tasks", "retry"), body, &out, false); err != nil {
		return 0, err
	}
	return out.Retried, nil
}

// TaskFilter selects the tasks of [Client.ListTasks]; zero fields select everything.
type TaskFilter struct {
	// Job keeps the tasks of this job (its name or id).
	Job string
	// Status keeps the tasks in this status.
	Status TaskStatus
	// Key keeps the task created with this key.
	Key string
	// DueAfter keeps tasks due at or after this time.
	DueAfter time.Time
	// DueBefore keeps tasks due before this time.
	DueBefore time.Time
	// Limit is the page's size: 0 for the server's 50; more than 1,000 is capped.
	Limit int
	// After is the Next cursor of the previous page.
	After string
}

// TaskPage is one page of [Client.ListTasks], newest first.
type TaskPage struct {
	// Items are the page's tasks.
	Items []Task `json:"items"`
	// Next is the cursor of the next page, to pass back as TaskFilter.After; "" on the
	// last page.
	Next string `json:"next"`
}

// ListTasks reads one page of the tasks that filter selects, newest first. Page through
// them by passing each page's Next back as filter.After until it is "".
func (c *Client) ListTasks(ctx context.Context, filter TaskFilter) (*TaskPage, error) {
	q := url.Values{}
	setIf(q, "job", filter.Job)
	setIf(q, "status", string(filter.Status))
	setIf(q, "key", filter.Key)
	if !filter.DueAfter.IsZero() {
		q.Set("due_after", formatTime(filter.DueAfter))
	}
	if !filter.DueBefore.IsZero() {
		q.Set("due_before", formatTime(filter.DueBefore))
	}
	if filter.Limit != 0 {
		q.Set("limit", strconv.Itoa(filter.Limit))
	}
	setIf(q, "after", filter.After)
	var out TaskPage
	if _, err := c.call(ctx, http.MethodGet, withQuery(apiPath("tasks"), q), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// setIf sets q's key to value unless value is "".
func setIf(q url.Values, key, value string) {
	if value != "" {
		q.Set(key, value)
	}
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }
