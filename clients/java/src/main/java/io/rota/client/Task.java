package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;

/**
 * A task as the API shows it ({@code TaskView}): one delayed, manual, scheduled or workflow
 * step execution of a job. Immutable.
 *
 * <p>{@link #dueAt()} is the current attempt's due time. {@link #created()} is true only on the
 * answer of {@link RotaClient#createTask} that made the task (the server's 201); the answer for
 * a {@code key} the job already had (200) and every other answer have it false.
 */
public final class Task {
  private final long id;
  private final long job;
  private final String kind;
  private final String statusName;
  private final TaskStatus status;
  private final Instant dueAt;
  private final int attempts;
  private final Integer maxAttempts;
  private final String key;
  private final int priority;
  private final String payload;
  private final Long lastRunId;
  private final Instant createdAt;
  private final Instant updatedAt;
  private final boolean created;

  private Task(JsonNode json, boolean created) {
    this.id = Json.requiredLong(json, "id");
    this.job = Json.requiredLong(json, "job");
    this.kind = Json.optionalText(json, "kind").orElse("delayed");
    this.statusName = Json.requiredText(json, "status");
    this.status = TaskStatus.fromWire(statusName);
    this.dueAt = Json.requiredTime(json, "due_at");
    this.attempts = Json.intOr(json, "attempts", 0);
    OptionalInt max = Json.optionalInt(json, "max_attempts");
    this.maxAttempts = max.isPresent() ? max.getAsInt() : null;
    this.key = Json.optionalText(json, "key").orElse(null);
    this.priority = Json.intOr(json, "priority", 0);
    this.payload = Json.optionalText(json, "payload").orElse(null);
    OptionalLong run = Json.optionalLong(json, "last_run_id");
    this.lastRunId = run.isPresent() ? run.getAsLong() : null;
    this.createdAt = Json.optionalTime(json, "created_at").orElse(null);
    this.updatedAt = Json.optionalTime(json, "updated_at").orElse(null);
    this.created = created;
  }

  static Task fromJson(JsonNode json, boolean created) {
    return new Task(json, created);
  }

  /**
   * The task's id.
   *
   * @return the id
   */
  public long id() {
    return id;
  }

  /**
   * The id of the task's job.
   *
   * @return the job's id
   */
  public long job() {
    return job;
  }

  /**
   * What created the task: {@code delayed} (the API), {@code manual} (a trigger), {@code cron}
   * (a schedule), {@code child} (a parent job's success) or {@code step} (a workflow).
   *
   * @return the kind as the API names it
   */
  public String kind() {
    return kind;
  }

  /**
   * Where the task is.
   *
   * @return the status; {@link TaskStatus#UNKNOWN} for one this client does not know
   */
  public TaskStatus status() {
    return status;
  }

  /**
   * The status as the API names it ({@code pending}, {@code succeeded}, …), also for one this
   * client does not know.
   *
   * @return the status's name
   */
  public String statusName() {
    return statusName;
  }

  /**
   * When the current attempt is (or was) due.
   *
   * @return the due time
   */
  public Instant dueAt() {
    return dueAt;
  }

  /**
   * How many attempts the server counts for the task.
   *
   * @return the attempts so far
   */
  public int attempts() {
    return attempts;
  }

  /**
   * The task's own attempt budget, if it was created with one (else the job's applies).
   *
   * @return 1 to 100, or empty
   */
  public OptionalInt maxAttempts() {
    return maxAttempts == null ? OptionalInt.empty() : OptionalInt.of(maxAttempts);
  }

  /**
   * The idempotency key it was created with.
   *
   * @return the key, or empty
   */
  public Optional<String> key() {
    return Optional.ofNullable(key);
  }

  /**
   * Its priority: −1000 to 1000, higher first.
   *
   * @return the priority (0 by default)
   */
  public int priority() {
    return priority;
  }

  /**
   * The run's input.
   *
   * @return the payload, or empty
   */
  public Optional<String> payload() {
    return Optional.ofNullable(payload);
  }

  /**
   * The id of its latest run (attempt), once one started.
   *
   * @return the run's id, or empty
   */
  public OptionalLong lastRunId() {
    return lastRunId == null ? OptionalLong.empty() : OptionalLong.of(lastRunId);
  }

  /**
   * When the task was created.
   *
   * @return the creation time (empty only from a server that leaves it out)
   */
  public Optional<Instant> createdAt() {
    return Optional.ofNullable(createdAt);
  }

  /**
   * When the task last changed.
   *
   * @return the time of its last change (empty only from a server that leaves it out)
   */
  public Optional<Instant> updatedAt() {
    return Optional.ofNullable(updatedAt);
  }

  /**
   * Whether this answer created the task: true only for {@link RotaClient#createTask} of a
   * new task (201); false for an existing {@code key}'s task (200) and every other read.
   *
   * @return whether the task is new
   */
  public boolean created() {
    return created;
  }

  @Override
  public boolean equals(Object o) {
    if (this == o) {
      return true;
    }
    if (!(o instanceof Task)) {
      return false;
    }
    Task t = (Task) o;
    return id == t.id
        && job == t.job
        && attempts == t.attempts
        && priority == t.priority
        && created == t.created
        && kind.equals(t.kind)
        && statusName.equals(t.statusName)
        && dueAt.equals(t.dueAt)
        && Objects.equals(maxAttempts, t.maxAttempts)
        && Objects.equals(key, t.key)
        && Objects.equals(payload, t.payload)
        && Objects.equals(lastRunId, t.lastRunId)
        && Objects.equals(createdAt, t.createdAt)
        && Objects.equals(updatedAt, t.updatedAt);
  }

  @Override
  public int hashCode() {
    return Objects.hash(id, job, statusName, dueAt, attempts, key, priority, lastRunId, updatedAt);
  }

  @Override
  public String toString() {
    return "Task{id=" + id + ", job=" + job + ", kind=" + kind + ", status=" + statusName
        + ", dueAt=" + dueAt + ", attempts=" + attempts
        + (maxAttempts != null ? ", maxAttempts=" + maxAttempts : "")
        + (key != null ? ", key=" + key : "")
        + ", priority=" + priority
        + (payload != null ? ", payload=" + abbreviate(payload) : "")
        + (lastRunId != null ? ", lastRunId=" + lastRunId : "")
        + (created ? ", created" : "") + "}";
  }

  static String abbreviate(String text) {
    return text.length() <= 80 ? '"' + text + '"' : '"' + text.substring(0, 77) + "...\"";
  }
}
