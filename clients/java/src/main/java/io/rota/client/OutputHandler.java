package io.rota.client;

/**
 * A {@link TaskHandler} that gives an output ({@link RotaClient#consumeWithOutput}): what it
 * returns is sent with the ack, e.g. a workflow step's output that the steps after it receive.
 * Throwing nacks the task, as for a {@link TaskHandler}.
 */
@FunctionalInterface
public interface OutputHandler {
  /**
   * Handles one task and gives its output.
   *
   * @param task the task, with its payload and lease
   * @return the output: any JSON value (a Jackson {@code JsonNode}, a map, a list, a string, a
   *     number, a POJO; at most 64 KiB), or {@code null} for none
   * @throws Exception to nack the task
   */
  Object handle(PulledTask task) throws Exception;
}
