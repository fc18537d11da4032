// Package rota is the Go client of Rota, a distributed job scheduler and delay queue
// (SPEC §6, §8, §10 of the Rota repository). It uses the standard library only.
//
// Producers create delayed tasks ([Client.CreateTask], [Client.CreateTasks]), read, list
// and cancel them. Consumers of a pull job lease its due tasks ([Client.Pull]) and ack,
// nack or extend each ([Client.Ack], [Client.Nack], [Client.Extend], [Client.AckBatch]),
// or hand a [Handler] to [Client.Consume], which long-polls, extends each lease while the
// handler works, and acks on success or nacks on error. Workflows: [Client.StartWorkflow]
// starts an instance and [Client.WaitInstance] waits for its output; a consumer gives a
// step's output with [Client.AckWithOutput] or [Client.ConsumeWithOutput].
//
// Delivery is at-least-once: a lease that expires (the consumer died, or held the task
// past its lease without extending it) is delivered again as the next attempt. Make
// handlers idempotent per task key, or per (task, attempt).
//
// Every answer outside 2xx is an [*APIError] carrying the HTTP status and the server's
// `{"error": "..."}` message; compare with [errors.Is] against [ErrNotFound],
// [ErrConflict], [ErrLeaseLost], [ErrInvalid] and the others, or read
// [APIError.StatusCode] and [APIError.Field]. No answer at all (a refused connection, a
// timeout, a cancelled context) is the transport's error, wrapped.
//
// Layout:
//   - client.go: [Client], its options and the one request path every call goes through.
//   - errors.go: [APIError] and the sentinel errors it matches.
//   - tasks.go: creating, reading, listing, cancelling and re-driving tasks.
//   - pull.go: pull delivery: pull, ack, nack, extend, batch ack.
//   - consume.go: the [Client.Consume] loop and the lease keeper behind it.
//   - workflows.go: starting, reading and waiting for workflow instances.
package rota
