package io.rota.client;

/**
 * What a consumer does with each pulled task ({@link RotaClient#consume}): returning acks the
 * task, throwing nacks it with the exception's text as the run's message (the task is retried
 * per its policy, or ends {@code dead}). The lease is extended while it runs.
 *
 * <p>Delivery is at-least-once: make the work idempotent per {@link PulledTask#key()} or
 * {@code (task, attempt)}.
 */
@FunctionalInterface
public interface TaskHandler {
  /**
   * Handles one task.
   *
   * @param task the task, with its payload and lease
   * @throws Exception to nack the task
   */
  void handle(PulledTask task) throws Exception;
}
