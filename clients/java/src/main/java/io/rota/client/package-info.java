/**
 * Java client of Rota, a distributed job scheduler and delay queue (its REST API v1).
 *
 * <p>Producers create delayed tasks ({@link io.rota.client.RotaClient#createTask},
 * {@link io.rota.client.RotaClient#createTasks}), read, list and cancel them. Consumers of a
 * {@code pull} job lease its due tasks ({@link io.rota.client.RotaClient#pull}) and ack, nack or
 * extend each lease, or hand a handler to {@link io.rota.client.RotaClient#consume}, which
 * long-polls, keeps each lease alive while the handler works, and acks or nacks. Workflows:
 * {@link io.rota.client.RotaClient#startWorkflow} starts an instance and
 * {@link io.rota.client.RotaClient#waitForInstance} waits for its output.
 *
 * <p>Layout:
 * <ul>
 *   <li>{@link io.rota.client.RotaClient} — the calls, over the JDK's {@code HttpClient};</li>
 *   <li>{@link io.rota.client.NewTask}, {@link io.rota.client.Backoff},
 *       {@link io.rota.client.TaskQuery}, {@link io.rota.client.PullOptions},
 *       {@link io.rota.client.AckItem}, {@link io.rota.client.ConsumeOptions} — what is sent;</li>
 *   <li>{@link io.rota.client.Task}, {@link io.rota.client.PulledTask},
 *       {@link io.rota.client.AckResult}, {@link io.rota.client.Page},
 *       {@link io.rota.client.WorkflowInstance}, {@link io.rota.client.InstanceStep} — what is
 *       answered (immutable values);</li>
 *   <li>{@link io.rota.client.RotaException} and its subclasses
 *       {@link io.rota.client.RotaApiException} (the server refused: status and its
 *       {@code {"error": "..."}} text) and {@link io.rota.client.RotaConnectionException}
 *       (no answer);</li>
 *   <li>{@link io.rota.client.TaskHandler}, {@link io.rota.client.OutputHandler} and
 *       {@link io.rota.client.ConsumerHandle} — the consumer loop.</li>
 * </ul>
 *
 * <p>Delivery is at-least-once: a lease that expires (the consumer died, or held it too long
 * without extending it) is delivered again as the task's next attempt. Make handlers idempotent
 * per task {@code key} or per {@code (task, attempt)}.
 */
package io.rota.client;
