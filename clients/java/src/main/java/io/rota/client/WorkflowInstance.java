package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * A workflow instance as the API shows it ({@code InstanceView}). Its {@link #output()} is
 * {@code {"<sink step>": its output, …}} once it ended. {@link #created()} is true only on the
 * answer of the {@link RotaClient#startWorkflow} that made it (201). Immutable.
 */
public final class WorkflowInstance {
  private final long id;
  private final long workflow;
  private final int version;
  private final String statusName;
  private final InstanceStatus status;
  private final JsonNode input;
  private final JsonNode output;
  private final String key;
  private final List<InstanceStep> steps;
  private final Instant createdAt;
  private final Instant finishedAt;
  private final boolean created;

  private WorkflowInstance(JsonNode json, boolean created) {
    this.id = Json.requiredLong(json, "id");
    this.workflow = Json.requiredLong(json, "workflow");
    this.version = Json.requiredInt(json, "version");
    this.statusName = Json.requiredText(json, "status");
    this.status = InstanceStatus.fromWire(statusName);
    this.input = Json.anyJson(json, "input");
    this.output = Json.anyJson(json, "output");
    this.key = Json.optionalText(json, "key").orElse(null);
    List<InstanceStep> list = new ArrayList<>();
    JsonNode s = json.get("steps");
    if (s != null && s.isArray()) {
      s.forEach(step -> list.add(InstanceStep.fromJson(step)));
    }
    this.steps = Collections.unmodifiableList(list);
    this.createdAt = Json.optionalTime(json, "created_at").orElse(null);
    this.finishedAt = Json.optionalTime(json, "finished_at").orElse(null);
    this.created = created;
  }

  static WorkflowInstance fromJson(JsonNode json, boolean created) {
    return new WorkflowInstance(json, created);
  }

  /**
   * The instance's id.
   *
   * @return the id
   */
  public long id() {
    return id;
  }

  /**
   * The workflow's id.
   *
   * @return the id
   */
  public long workflow() {
    return workflow;
  }

  /**
   * The workflow's version the instance runs (a change of the workflow does not touch it).
   *
   * @return the version
   */
  public int version() {
    return version;
  }

  /**
   * Where the instance is.
   *
   * @return the status; {@link InstanceStatus#UNKNOWN} for one this client does not know
   */
  public InstanceStatus status() {
    return status;
  }

  /**
   * The status as the API names it.
   *
   * @return e.g. {@code running}
   */
  public String statusName() {
    return statusName;
  }

  /**
   * Whether the instance still runs (its output is not final yet).
   *
   * @return true while {@code running}
   */
  public boolean isRunning() {
    return status == InstanceStatus.RUNNING;
  }

  /**
   * The input it was started with.
   *
   * @return a copy of the input (JSON {@code null} if none), never Java {@code null}
   */
  public JsonNode input() {
    return input.deepCopy();
  }

  /**
   * {@code {"<sink step>": its output, …}} once the instance ended; JSON {@code null} before.
   *
   * @return a copy of the output, never Java {@code null}
   */
  public JsonNode output() {
    return output.deepCopy();
  }

  /**
   * The idempotency key it was started with.
   *
   * @return the key, or empty
   */
  public Optional<String> key() {
    return Optional.ofNullable(key);
  }

  /**
   * Its steps, in the workflow's order.
   *
   * @return the steps (unmodifiable)
   */
  public List<InstanceStep> steps() {
    return steps;
  }

  /**
   * The step named {@code name}.
   *
   * @param name the step's name
   * @return the step, or empty if the workflow has none of that name
   */
  public Optional<InstanceStep> step(String name) {
    return steps.stream().filter(s -> s.name().equals(name)).findFirst();
  }

  /**
   * When it was started.
   *
   * @return the time (empty only from a server that leaves it out)
   */
  public Optional<Instant> createdAt() {
    return Optional.ofNullable(createdAt);
  }

  /**
   * When it ended.
   *
   * @return the time, or empty while it runs
   */
  public Optional<Instant> finishedAt() {
    return Optional.ofNullable(finishedAt);
  }

  /**
   * Whether this answer started the instance: true only for {@link RotaClient#startWorkflow}
   * of a new instance (201), false for a known {@code key}'s (200) and every read.
   *
   * @return whether it is new
   */
  public boolean created() {
    return created;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof WorkflowInstance)) {
      return false;
    }
    WorkflowInstance w = (WorkflowInstance) o;
    return id == w.id && workflow == w.workflow && version == w.version && created == w.created
        && statusName.equals(w.statusName) && input.equals(w.input) && output.equals(w.output)
        && Objects.equals(key, w.key) && steps.equals(w.steps)
        && Objects.equals(createdAt, w.createdAt) && Objects.equals(finishedAt, w.finishedAt);
  }

  @Override
  public int hashCode() {
    return Objects.hash(id, workflow, version, statusName);
  }

  @Override
  public String toString() {
    return "WorkflowInstance{id=" + id + ", workflow=" + workflow + ", version=" + version
        + ", status=" + statusName + ", input=" + input + ", output=" + output
        + (key != null ? ", key=" + key : "") + ", steps=" + steps
        + (created ? ", created" : "") + "}";
  }
}
