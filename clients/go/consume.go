package rota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler handles one task pulled by [Client.Consume]. Returning nil acks the task;
// returning an error nacks it with the error's text as the reason, and the task is
// retried per its job's policy. A panic is recovered and nacks it too.
//
// ctx is cancelled when the Consume context is (stop soon: see [Client.Consume]), and
// when the task's lease was lost (context.Cause(ctx) is then [ErrLeaseLost]: the task
// is being delivered again, so the work may stop).
type Handler func(ctx context.Context, item Pulled) error

// OutputHandler is a [Handler] that also gives the attempt's output: returning (output,
// nil) acks the task with output (encoded as JSON; nil gives none), as
// [Client.AckWithOutput] does. For workflow steps.
type OutputHandler func(ctx context.Context, item Pulled) (output any, err error)

// ConsumeOptions tunes [Client.Consume]; zero fields take the defaults.
type ConsumeOptions struct {
	// Consumer names this consumer; its runs show executor "pull:<Consumer>".
	Consumer string
	// Max is how many tasks one pull leases (1 to 1,000; 10 by default). They are
	// handled one after the other, and all their leases are extended meanwhile.
	Max int
	// Lease is each task's lease (1 s to 12 h; 30 s by default). While a batch is being
	// handled, the leases of its unfinished tasks are extended every Lease/3.
	Lease time.Duration
	// Wait is how long a pull waits for a task to fall due (up to 30 s; 20 s by default).
	Wait time.Duration
	// Logger receives what the loop cannot return: a refused ack, a lost lease, a pull
	// that failed and is tried again. slog.Default() by default.
	Logger *slog.Logger
}

const (
	defaultConsumeMax   = 10
	defaultConsumeLease = 30 * time.Second
	defaultConsumeWait  = 20 * time.Second
	// The pause after a pull that failed for a reason that may pass, doubling up to max.
	firstPullPause = 500 * time.Millisecond
	maxPullPause   = 10 * time.Second
	// How long one ack or nack may take, and the pauses before trying one that got no
	// answer (or a 5xx) again.
	finishTimeout = 30 * time.Second
	// The longest nack reason sent; a longer error text is cut.
	maxReasonBytes = 4000
)

var finishPauses = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second}

func (o ConsumeOptions) withDefaults() ConsumeOptions {
	if o.Max == 0 {
		o.Max = defaultConsumeMax
	}
	if o.Lease == 0 {
		o.Lease = defaultConsumeLease
	}
	if o.Wait == 0 {
		o.Wait = defaultConsumeWait
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Consume runs a consumer of the pull job job (its name or id) until ctx is cancelled:
// it long-polls for tasks, calls handler with each in turn while a background goroutine
// extends the leases of the batch's unfinished tasks every Lease/3, then acks the task
// when the handler returns nil or nacks it with the error's text.
//
// Cancelling ctx stops it cleanly: a pull in progress is abandoned, the running handler
// sees its ctx cancelled, and Consume returns nil once that handler has returned. A task
// whose handler returned nil is still acked. A task whose handler returned an error
// after the cancellation, and the batch's tasks not handed to the handler yet, are left
// to their leases: they are delivered again once the lease expires (a lost attempt, not
// a failed one), since a stop is no failure of the task.
//
// A pull that gets no answer or a 5xx is tried again after a pause (logged); any other
// refusal of a pull (401, an unknown job, a job not delivered by pull, an option out of
// range) is returned. An ack or nack that gets no answer is tried again a few times; one
// refused (the lease was lost) is logged, as the task is delivered again: make handlers
// idempotent per task key or (task, attempt).
func (c *Client) Consume(ctx context.Context, job string, handler Handler, opts ConsumeOptions) error {
	if handler == nil {
		return errors.New("rota: Consume needs a handler")
	}
	return c.ConsumeWithOutput(ctx, job, func(ctx context.Context, item Pulled) (any, error) {
		return nil, handler(ctx, item)
	}, opts)
}

// ConsumeWithOutput is [Client.Consume] with a handler that gives each attempt's output
// (a workflow step's, for the steps after it), acked as [Client.AckWithOutput] does.
func (c *Client) ConsumeWithOutput(ctx context.Context, job string, handler OutputHandler, opts ConsumeOptions) error {
	if handler == nil {
		return errors.New("rota: ConsumeWithOutput needs a handler")
	}
	opts = opts.withDefaults()
	log := opts.Logger.With("job", job)
	pull := PullOptions{Max: opts.Max, Lease: opts.Lease, Wait: opts.Wait, Consumer: opts.Consumer}
	pause := firstPullPause
	for ctx.Err() == nil {
		items, err := c.Pull(ctx, job, pull)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !retryable(err) {
				return err
			}
			log.Warn("rota: pull failed; trying again", "in", pause, "err", err)
			if !sleep(ctx, pause) {
				break
			}
			pause = min(2*pause, maxPullPause)
			continue
		}
		pause = firstPullPause
		if len(items) > 0 {
			c.handleBatch(ctx, items, handler, opts.Lease, log)
		}
	}
	return nil
}

// handleBatch hands each pulled item to handler in turn, its lease kept alive meanwhile,
// and acks or nacks it.
func (c *Client) handleBatch(ctx context.Context, items []Pulled, handler OutputHandler, lease time.Duration, log *slog.Logger) {
	keeper := startLeaseKeeper(ctx, c, items, lease, log)
	defer keeper.stop()
	for _, item := range items {
		itemLog := log.With("task", item.Task, "attempt", item.Attempt)
		if ctx.Err() != nil {
			keeper.release(item.Task)
			itemLog.Info("rota: stopped before handling a pulled task; it is delivered again once its lease expires")
			continue
		}
		output, err := runHandler(keeper.context(item.Task), handler, item, itemLog)
		lost := keeper.release(item.Task)
		switch {
		case lost:
			itemLog.Warn("rota: the lease was lost while the task was being handled; it is delivered again, so neither acked nor nacked", "err", err)
		case err == nil:
			c.finish(ctx, item, output, nil, itemLog)
		case ctx.Err() != nil:
			itemLog.Info("rota: the handler failed after the consumer was stopped; not nacked, the task is delivered again once its lease expires", "err", err)
		default:
			c.finish(ctx, item, nil, err, itemLog)
		}
	}
}

// runHandler calls handler, turning a panic into an error.
func runHandler(ctx context.Context, handler OutputHandler, item Pulled, log *slog.Logger) (output any, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("rota: the handler panicked", "panic", r, "stack", string(debug.Stack()))
			output, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return handler(ctx, item)
}

// finish acks (failure nil) or nacks item, trying again when no answer came. It runs
// even once ctx is cancelled: the work is done, and saying so spares a redelivery.
func (c *Client) finish(ctx context.Context, item Pulled, output any, failure error, log *slog.Logger) {
	verb := "ack"
	if failure != nil {
		verb = "nack"
	}
	background := context.WithoutCancel(ctx)
	for attempt := 0; ; attempt++ {
		callCtx, cancel := context.WithTimeout(background, finishTimeout)
		var err error
		if failure == nil {
			_, err = c.AckWithOutput(callCtx, item.Task, item.Lease, output)
		} else {
			_, err = c.Nack(callCtx, item.Task, item.Lease, reason(failure))
		}
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, ErrLeaseLost):
			// After a retry this may be our own first ack or nack, which did land.
			log.Warn("rota: "+verb+" refused: the lease is no longer held; the task is delivered again unless an earlier "+verb+" landed", "err", err)
			return
		case retryable(err) && attempt < len(finishPauses):
			time.Sleep(finishPauses[attempt])
		default:
			log.Error("rota: "+verb+" failed; the task is delivered again once its lease expires", "tries", attempt+1, "err", err)
			return
		}
	}
}

// reason is err's text as a nack reason, cut at maxReasonBytes on a rune boundary.
func reason(err error) string {
	text := err.Error()
	if len(text) <= maxReasonBytes {
		return text
	}
	cut := maxReasonBytes
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}

// sleep waits d or until ctx is done; false if ctx is.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// leaseKeeper extends the leases of a batch's unfinished tasks every lease/3 until each
// is released or the keeper is stopped. A task whose extension is refused as stale is
// marked lost and its handler's context cancelled with ErrLeaseLost.
type leaseKeeper struct {
	client *Client
	lease  time.Duration
	log    *slog.Logger

	mu   sync.Mutex
	held map[int64]*heldLease

	cancel context.CancelFunc
	done   chan struct{}
}

type heldLease struct {
	item   Pulled
	ctx    context.Context // the handler's
	cancel context.CancelCauseFunc
	lost   bool
}

func startLeaseKeeper(ctx context.Context, c *Client, items []Pulled, lease time.Duration, log *slog.Logger) *leaseKeeper {
	k := &leaseKeeper{
		client: c,
		lease:  lease,
		log:    log,
		held:   make(map[int64]*heldLease, len(items)),
		done:   make(chan struct{}),
	}
	for _, item := range items {
		itemCtx, cancel := context.WithCancelCause(ctx)
		k.held[item.Task] = &heldLease{item: item, ctx: itemCtx, cancel: cancel}
	}
	// The keeper outlives a cancelled ctx until stopped: a handler still finishing after
	// the stop keeps its lease, so its ack can land.
	keeperCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel = cancel
	go k.run(keeperCtx)
	return k
}

func (k *leaseKeeper) run(ctx context.Context) {
	defer close(k.done)
	ticker := time.NewTicker(max(k.lease/3, 100*time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		for _, h := range k.unfinished() {
			if ctx.Err() != nil {
				return
			}
			k.extend(ctx, h)
		}
	}
}

// unfinished is a snapshot of the leases still held.
func (k *leaseKeeper) unfinished() []*heldLease {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*heldLease, 0, len(k.held))
	for _, h := range k.held {
		if !h.lost {
			out = append(out, h)
		}
	}
	return out
}

func (k *leaseKeeper) extend(ctx context.Context, h *heldLease) {
	callCtx, cancel := context.WithTimeout(ctx, k.lease)
	defer cancel()
	_, err := k.client.Extend(callCtx, h.item.Task, h.item.Lease, k.lease)
	if err == nil || ctx.Err() != nil {
		return
	}
	log := k.log.With("task", h.item.Task, "attempt", h.item.Attempt)
	if !errors.Is(err, ErrLeaseLost) {
		log.Warn("rota: extending a lease failed; trying again at the next tick", "err", err)
		return
	}
	k.mu.Lock()
	_, stillHeld := k.held[h.item.Task]
	if stillHeld {
		h.lost = true
	}
	k.mu.Unlock()
	if stillHeld { // else it was just acked or nacked, which ended the lease
		log.Warn("rota: the lease was lost while the task was being handled; it is delivered again", "err", err)
		h.cancel(ErrLeaseLost)
	}
}

// context is the handler's context for task.
func (k *leaseKeeper) context(task int64) context.Context {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[task].ctx
}

// release stops extending task's lease and answers whether it was lost meanwhile.
func (k *leaseKeeper) release(task int64) (lost bool) {
	k.mu.Lock()
	h := k.held[task]
	delete(k.held, task)
	if h != nil {
		lost = h.lost
	}
	k.mu.Unlock()
	if h != nil {
		h.cancel(nil)
	}
	return lost
}

// stop ends the keeper and waits for it; leases not released are no longer extended.
func (k *leaseKeeper) stop() {
	k.cancel()
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	for task, h := range k.held {
		h.cancel(nil)
		delete(k.held, task)
	}
}
