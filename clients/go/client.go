package rota

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Version is this client's version, sent in its User-Agent header.
const Version = "0.1.0"

const userAgent = "rota-client-go/" + Version

// DefaultTimeout bounds each request of a Client made without [WithHTTPClient]. It is
// longer than the longest long poll the API allows (a pull waits at most 30 s), so a
// pull with Wait never times out on its own; bound calls with their context instead.
const DefaultTimeout = 60 * time.Second

// timeFormat is the API's time format: RFC 3339 in UTC with milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// maxErrorBody caps how much of a non-2xx answer is read and kept in an APIError.
const maxErrorBody = 1 << 20

// Client talks to one Rota scheduler node (any node serves every call). It is safe for
// concurrent use by several goroutines; make one and share it.
type Client struct {
	base  string // scheme://host[:port][/prefix], without a trailing slash
	token string
	http  *http.Client
}

// Option configures a Client made by [NewClient].
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc (its transport, proxy,
// TLS settings and timeout). A timeout shorter than a pull's Wait fails that pull; the
// default client's timeout is [DefaultTimeout].
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// NewClient makes a client of the node at baseURL (such as "http://127.0.0.1:8080",
// optionally with a path prefix behind a proxy) that authenticates with the API token
// token (`Authorization: Bearer <token>`, such as ROTA_API_TOKEN's value).
func NewClient(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("rota: %q is not an http:// or https:// URL", baseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	c := &Client{
		base:  strings.TrimRight(u.String(), "/"),
		token: token,
		http:  &http.Client{Timeout: DefaultTimeout},
	}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// BaseURL is the node's URL the client was made with, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// Do sends any other call of the REST API, such as creating a job or a workflow:
// method and path (starting with "/api/v1/", optionally with a query string; see the
// OpenAPI document at GET /api/v1/openapi.json) with body encoded as JSON (nil sends
// none), and decodes a 2xx answer's JSON into out (nil ignores it). A non-2xx answer is
// an [*APIError], as for every other method.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	_, err := c.call(ctx, method, path, body, out, false)
	return err
}

// apiPath is "/api/v1/" followed by segments, each escaped as one path segment (a job
// named "a/b" stays one segment).
func apiPath(segments ...string) string {
	escaped := make([]string, len(segments))
	for i, s := range segments {
		escaped[i] = url.PathEscape(s)
	}
	return "/api/v1/" + strings.Join(escaped, "/")
}

// withQuery appends q to path when it has any value.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// call is the one request path: it sends body as JSON, turns a non-2xx answer into an
// *APIError (leaseOp marks ack, nack and extend, whose 409 is ErrLeaseLost), decodes a
// 2xx answer into out, and answers the HTTP status.
func (c *Client) call(ctx context.Context, method, path string, body, out any, leaseOp bool) (int, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("rota: %s %s: encoding the request: %w", method, path, err)
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return 0, fmt.Errorf("rota: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// *url.Error names the method and URL; context errors stay visible to errors.Is.
		return 0, fmt.Errorf("rota: %w", err)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return resp.StatusCode, newAPIError(method, path, resp.StatusCode, resp.Status, data, leaseOp)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("rota: %s %s: reading the answer: %w", method, path, err)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("rota: %s %s: the answer is not the JSON expected: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// millis is d in whole milliseconds, a partial millisecond rounded up, so that a
// positive duration never becomes 0.
func millis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// formatTime is t as the API writes times.
func formatTime(t time.Time) string {
	return t.UTC().Format(timeFormat)
}

// retryable tells whether an error of a call may go away by itself: no answer at all,
// or a 5xx (the API's 503 and 507 say "nothing was changed; retry").
func retryable(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Retryable()
	}
	return err != nil
}
