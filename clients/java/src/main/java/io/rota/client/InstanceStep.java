package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;

/** One step of a {@link WorkflowInstance}, as the API shows it. Immutable. */
public final class InstanceStep {
  /** How far a mapped step's elements are. Immutable. */
  public static final class Items {
    private final long total;
    private final long succeeded;
    private final long failed;
    private final long running;

    private Items(JsonNode json) {
      this.total = json.path("total").asLong();
      this.succeeded = json.path("succeeded").asLong();
      this.failed = json.path("failed").asLong();
      this.running = json.path("running").asLong();
    }

    /**
     * The elements the step runs once each.
     *
     * @return how many
     */
    public long total() {
      return total;
    }

    /**
     * Elements whose task succeeded.
     *
     * @return how many
     */
    public long succeeded() {
      return succeeded;
    }

    /**
     * Elements whose task ended {@code dead}.
     *
     * @return how many
     */
    public long failed() {
      return failed;
    }

    /**
     * Elements whose task has not ended.
     *
     * @return how many
     */
    public long running() {
      return running;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Items)) {
        return false;
      }
      Items i = (Items) o;
      return total == i.total && succeeded == i.succeeded && failed == i.failed
          && running == i.running;
    }

    @Override
    public int hashCode() {
      return Objects.hash(total, succeeded, failed, running);
    }

    @Override
    public String toString() {
      return "Items{total=" + total + ", succeeded=" + succeeded + ", failed=" + failed
          + ", running=" + running + "}";
    }
  }

  private final String name;
  private final String statusName;
  private final StepStatus status;
  private final Long task;
  private final List<Long> runs;
  private final JsonNode output;
  private final Items items;
  private final String message;
  private final Instant startedAt;
  private final Instant finishedAt;

  private InstanceStep(JsonNode json) {
    this.name = Json.requiredText(json, "name");
    this.statusName = Json.requiredText(json, "status");
    this.status = StepStatus.fromWire(statusName);
    OptionalLong t = Json.optionalLong(json, "task");
    this.task = t.isPresent() ? t.getAsLong() : null;
    this.runs = Json.longs(json.get("runs"));
    this.output = Json.anyJson(json, "output");
    JsonNode it = json.get("items");
    this.items = it == null || it.isNull() ? null : new Items(it);
    this.message = Json.optionalText(json, "message").orElse(null);
    this.startedAt = Json.optionalTime(json, "started_at").orElse(null);
    this.finishedAt = Json.optionalTime(json, "finished_at").orElse(null);
  }

  static InstanceStep fromJson(JsonNode json) {
    return new InstanceStep(json);
  }

  /**
   * The step's name in its workflow.
   *
   * @return the name
   */
  public String name() {
    return name;
  }

  /**
   * Where the step is.
   *
   * @return the status; {@link StepStatus#UNKNOWN} for one this client does not know
   */
  public StepStatus status() {
    return status;
  }

  /**
   * The status as the API names it.
   *
   * @return e.g. {@code succeeded}
   */
  public String statusName() {
    return statusName;
  }

  /**
   * The step's task (a mapped step's first element's), once created.
   *
   * @return the task's id, or empty
   */
  public OptionalLong task() {
    return task == null ? OptionalLong.empty() : OptionalLong.of(task);
  }

  /**
   * Every run of the step's tasks, oldest first.
   *
   * @return the runs' ids (unmodifiable)
   */
  public List<Long> runs() {
    return runs;
  }

  /**
   * The step's output (a JSON value; JSON {@code null} until it has one).
   *
   * @return a copy of the output, never Java {@code null}
   */
  public JsonNode output() {
    return output.deepCopy();
  }

  /**
   * A mapped step's elements.
   *
   * @return the counts, or empty for a step that is not mapped
   */
  public Optional<Items> items() {
    return Optional.ofNullable(items);
  }

  /**
   * Why the step failed, when the workflow says so (not its task).
   *
   * @return the message, or empty
   */
  public Optional<String> message() {
    return Optional.ofNullable(message);
  }

  /**
   * When the step started.
   *
   * @return the time, or empty if it has not
   */
  public Optional<Instant> startedAt() {
    return Optional.ofNullable(startedAt);
  }

  /**
   * When the step ended.
   *
   * @return the time, or empty if it has not
   */
  public Optional<Instant> finishedAt() {
    return Optional.ofNullable(finishedAt);
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof InstanceStep)) {
      return false;
    }
    InstanceStep s = (InstanceStep) o;
    return name.equals(s.name) && statusName.equals(s.statusName) && Objects.equals(task, s.task)
        && runs.equals(s.runs) && output.equals(s.output) && Objects.equals(items, s.items)
        && Objects.equals(message, s.message) && Objects.equals(startedAt, s.startedAt)
        && Objects.equals(finishedAt, s.finishedAt);
  }

  @Override
  public int hashCode() {
    return Objects.hash(name, statusName, task, runs);
  }

  @Override
  public String toString() {
    return "InstanceStep{name=" + name + ", status=" + statusName
        + (task != null ? ", task=" + task : "") + ", runs=" + runs
        + (output.isNull() ? "" : ", output=" + output)
        + (items != null ? ", items=" + items : "")
        + (message != null ? ", message=" + message : "") + "}";
  }
}
