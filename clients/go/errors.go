package rota

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Sentinel errors an [*APIError] matches with [errors.Is], by its HTTP status. They are
// never returned bare.
var (
	// ErrBadRequest is a 400: a malformed request (bad JSON, an unknown field, a query
	// parameter that does not parse).
	ErrBadRequest = errors.New("rota: bad request")
	// ErrUnauthorized is a 401: the token is missing, unknown or revoked.
	ErrUnauthorized = errors.New("rota: unauthorized")
	// ErrForbidden is a 403: the token's user lacks the role or the app for this.
	ErrForbidden = errors.New("rota: forbidden")
	// ErrNotFound is a 404: no such task, job, workflow, instance or route.
	ErrNotFound = errors.New("rota: not found")
	// ErrConflict is a 409: the request conflicts with the current state (cancelling a
	// running task, re-driving a task that is not dead, a stale lease).
	ErrConflict = errors.New("rota: conflict")
	// ErrLeaseLost is the 409 of [Client.Ack], [Client.Nack] or [Client.Extend] (and
	// their variants): the lease is not the task's current one (it expired and the task
	// was handed out again, or the attempt already ended). Nothing was changed. An error
	// that matches it matches [ErrConflict] too.
	ErrLeaseLost = errors.New("rota: lease lost")
	// ErrTooLarge is a 413: the body, a payload or a batch is over its limit.
	ErrTooLarge = errors.New("rota: too large")
	// ErrInvalid is a 422: a value out of range or inconsistent; [APIError.Field] names
	// the field.
	ErrInvalid = errors.New("rota: invalid value")
	// ErrServer is any 5xx: the server (or a proxy before it) failed, or its database
	// cannot take the request now (503, 507: nothing was changed; retry).
	ErrServer = errors.New("rota: server error")
)

// APIError is an answer of the server outside 2xx. Every method of [Client] returns one
// (as an error; use [errors.As]) when the server refused a request.
type APIError struct {
	// StatusCode is the HTTP status (404, 409, 422, …).
	StatusCode int
	// Status is the HTTP status line's text ("422 Unprocessable Entity").
	Status string
	// Message is the server's `error` text, in words a user can act on (such as
	// "priority: must be between -1000 and 1000 (got 5000)"); the answer's text when it
	// was not the API's JSON error shape.
	Message string
	// Body is the answer's body as the server sent it (at most 1 MiB of it).
	Body []byte
	// Method and Path are the request's ("POST", "/api/v1/tasks").
	Method, Path string

	leaseOp bool
}

// errorBody is the API's error shape (the OpenAPI schema ErrorBody).
type errorBody struct {
	Error *string `json:"error"`
}

func newAPIError(method, path string, code int, status string, body []byte, leaseOp bool) *APIError {
	message := ""
	var parsed errorBody
	if json.Unmarshal(body, &parsed) == nil && parsed.Error != nil {
		message = *parsed.Error
	} else if text := strings.TrimSpace(string(body)); text != "" {
		if len(text) > 500 {
			text = text[:500]
		}
		message = text
	} else {
		message = http.StatusText(code)
	}
	return &APIError{
		StatusCode: code,
		Status:     status,
		Message:    message,
		Body:       body,
		Method:     method,
		Path:       path,
		leaseOp:    leaseOp,
	}
}

// Error is "rota: METHOD PATH: STATUS: message".
func (e *APIError) Error() string {
	status := e.Status
	if status == "" {
		status = fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("rota: %s %s: %s: %s", e.Method, e.Path, status, e.Message)
}

// Is matches the sentinel errors by status: [ErrBadRequest], [ErrUnauthorized],
// [ErrForbidden], [ErrNotFound], [ErrConflict], [ErrLeaseLost], [ErrTooLarge],
// [ErrInvalid] and [ErrServer].
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.StatusCode == http.StatusBadRequest
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	case ErrLeaseLost:
		return e.LeaseLost()
	case ErrTooLarge:
		return e.StatusCode == http.StatusRequestEntityTooLarge
	case ErrInvalid:
		return e.StatusCode == http.StatusUnprocessableEntity
	case ErrServer:
		return e.StatusCode >= 500
	}
	return false
}

// LeaseLost tells whether this is the 409 of an ack, nack or extend whose lease is no
// longer the task's (see [ErrLeaseLost]).
func (e *APIError) LeaseLost() bool {
	return e.leaseOp && e.StatusCode == http.StatusConflict
}

// Retryable tells whether the same request may succeed later without a change: a 5xx
// (the API answers 503 or 507 when its database cannot take a request now, having
// changed nothing).
func (e *APIError) Retryable() bool {
	return e.StatusCode >= 500
}

var (
	// "priority: …", "tasks[1].key: …", "backoff.delay_ms: …"
	fieldPrefix = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])*(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])*)*): `)
	// "query parameter `status`: …", "path parameter `id` must be …"
	parameterField = regexp.MustCompile("^(?:query|path) parameter `([^`]+)`")
	// serde's "missing field `job`" and "unknown field `bogus`"
	serdeField = regexp.MustCompile("(?:missing|unknown) field `([^`]+)`")
)

// Field is the request field the server's message names, best effort: "priority" for
// "priority: must be between -1000 and 1000 (got 5000)", "tasks[1].key" for a batch's
// second item, "backoff.delay_ms" for "invalid JSON body: backoff: missing field
// `delay_ms`", "status" for "query parameter `status`: …". It is "" when the message
// names no field (such as "task 42 not found"). The API returns a message only, not a
// separate field, so this reads the message's "<field>: " prefix that Rota's validation
// messages carry.
func (e *APIError) Field() string {
	msg := e.Message
	for _, prefix := range []string{"invalid JSON body: ", "malformed JSON body: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	if m := parameterField.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	path := ""
	if m := fieldPrefix.FindStringSubmatch(msg); m != nil {
		path, msg = m[1], msg[len(m[0]):]
	}
	if m := serdeField.FindStringSubmatch(msg); m != nil && !strings.HasSuffix(path, "."+m[1]) && path != m[1] {
		if path == "" {
			return m[1]
		}
		return path + "." + m[1]
	}
	return path
}
