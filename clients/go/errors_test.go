package rota_test

import (
	"errors"
	"testing"

	rota "github.com/rota-scheduler/rota/clients/go"
)

// The messages are ones the server answered (see the tests against it).
func TestAPIErrorField(t *testing.T) {
	for message, want := range map[string]string{
		"priority: must be between -1000 and 1000 (got 5000)":                                       "priority",
		"delay_ms: give either `delay_ms` or `run_at`, not both":                                    "delay_ms",
		"tasks[1].key: `d` is already used by tasks[0] of the same job; keys must be unique":        "tasks[1].key",
		"job: job `nope` does not exist":                                                            "job",
		"invalid JSON body: bogus: unknown field `bogus`, expected one of `job` at line 1 column 2": "bogus",
		"invalid JSON body: tasks[1]: missing field `job` at line 1 column 42":                      "tasks[1].job",
		"invalid JSON body: backoff: missing field `delay_ms` at line 1 column 43":                  "backoff.delay_ms",
		"invalid JSON body: missing field `job` at line 1 column 15":                                "job",
		"invalid JSON body: delay_ms: invalid type: string \"x\", expected i64 at line 1 column 30": "delay_ms",
		"query parameter `status`: `bogus` is not a task status":                                    "status",
		"path parameter `id` must be an integer id, not `abc`":                                      "id",
		"malformed JSON body: EOF while parsing an object at line 1 column 29":                      "",
		"task 999999 not found":                  "",
		"invalid API token (unknown or revoked)": "",
	} {
		if got := (&rota.APIError{StatusCode: 422, Message: message}).Field(); got != want {
			t.Errorf("Field of %q = %q, want %q", message, got, want)
		}
	}
}

func TestAPIErrorMatchesItsStatus(t *testing.T) {
	sentinels := []error{
		rota.ErrBadRequest, rota.ErrUnauthorized, rota.ErrForbidden, rota.ErrNotFound, rota.ErrConflict,
		rota.ErrLeaseLost, rota.ErrTooLarge, rota.ErrInvalid, rota.ErrServer,
	}
	for status, want := range map[int]error{
		400: rota.ErrBadRequest, 401: rota.ErrUnauthorized, 403: rota.ErrForbidden, 404: rota.ErrNotFound,
		409: rota.ErrConflict, 413: rota.ErrTooLarge, 422: rota.ErrInvalid, 503: rota.ErrServer, 507: rota.ErrServer,
	} {
		err := error(&rota.APIError{StatusCode: status, Method: "GET", Path: "/api/v1/tasks/1", Message: "m"})
		for _, sentinel := range sentinels {
			if got := errors.Is(err, sentinel); got != (sentinel == want) {
				t.Errorf("%d is %v: %t", status, sentinel, got)
			}
		}
		if retry := (&rota.APIError{StatusCode: status}).Retryable(); retry != (status >= 500) {
			t.Errorf("%d retryable: %t", status, retry)
		}
	}
	err := &rota.APIError{StatusCode: 404, Status: "404 Not Found", Method: "GET", Path: "/api/v1/tasks/7", Message: "task 7 not found"}
	if got := err.Error(); got != "rota: GET /api/v1/tasks/7: 404 Not Found: task 7 not found" {
		t.Errorf("Error() = %q", got)
	}
}
