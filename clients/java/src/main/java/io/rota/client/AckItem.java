package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Objects;

/**
 * One lease to ack with {@link RotaClient#ackBatch}, optionally with the attempt's output.
 * Immutable.
 */
public final class AckItem {
  private final long task;
  private final String lease;
  private final JsonNode output;

  private AckItem(long task, String lease, JsonNode output) {
    this.task = task;
    this.lease = Objects.requireNonNull(lease, "lease");
    this.output = output;
  }

  /**
   * The ack of task {@code task}'s lease {@code lease}.
   *
   * @param task the task's id
   * @param lease the lease its pull gave
   * @return the item
   */
  public static AckItem of(long task, String lease) {
    return new AckItem(task, lease, null);
  }

  /**
   * The ack of a pulled task's lease.
   *
   * @param pulled the task as pulled
   * @return the item
   */
  public static AckItem of(PulledTask pulled) {
    return new AckItem(pulled.task(), pulled.lease(), null);
  }

  /**
   * This ack with the attempt's output (a workflow step's, given to the steps after it; at
   * most 64 KiB).
   *
   * @param output any JSON value: a Jackson {@code JsonNode}, a map, a list, a string, a
   *     number, a POJO; {@code null} for none
   * @return a new item
   */
  public AckItem withOutput(Object output) {
    return new AckItem(task, lease, output == null ? null : Json.toTree(output).deepCopy());
  }

  /**
   * The task's id.
   *
   * @return the id
   */
  public long task() {
    return task;
  }

  ObjectNode toJson() {
    ObjectNode json = Json.object().put("task", task).put("lease", lease);
    if (output != null) {
      json.set("output", output.deepCopy());
    }
    return json;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof AckItem && toJson().equals(((AckItem) o).toJson());
  }

  @Override
  public int hashCode() {
    return toJson().hashCode();
  }

  @Override
  public String toString() {
    return "AckItem" + toJson();
  }
}
