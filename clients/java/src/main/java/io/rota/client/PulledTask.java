package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;

/**
 * A task handed to this consumer by a pull, with its lease. Give {@link #task()} and
 * {@link #lease()} back to {@link RotaClient#ack}, {@link RotaClient#nack} or
 * {@link RotaClient#extend}: only the current lease's holder can. A later {@link #attempt()}
 * of the same task is a redelivery of the same work (dedupe on {@link #key()} or on
 * {@code (task, attempt)}). Immutable.
 */
public final class PulledTask {
  private final long task;
  private final int attempt;
  private final String lease;
  private final String payload;
  private final String key;
  private final int priority;
  private final Instant dueAt;
  private final Instant leaseExpiresAt;

  private PulledTask(JsonNode json) {
    this.task = Json.requiredLong(json, "task");
    this.attempt = Json.requiredInt(json, "attempt");
    this.lease = Json.requiredText(json, "lease");
    this.payload = Json.optionalText(json, "payload").orElse(null);
    this.key = Json.optionalText(json, "key").orElse(null);
    this.priority = Json.intOr(json, "priority", 0);
    this.dueAt = Json.requiredTime(json, "due_at");
    this.leaseExpiresAt = Json.requiredTime(json, "lease_expires_at");
  }

  static PulledTask fromJson(JsonNode json) {
    return new PulledTask(json);
  }

  /**
   * The task's id.
   *
   * @return the id
   */
  public long task() {
    return task;
  }

  /**
   * Which attempt of the task this is (1-based).
   *
   * @return the attempt number
   */
  public int attempt() {
    return attempt;
  }

  /**
   * The lease: give it back to ack, nack or extend.
   *
   * @return the opaque lease token
   */
  public String lease() {
    return lease;
  }

  /**
   * The task's payload (for a workflow step: {@code {"input": …, "steps": {…}}}).
   *
   * @return the payload, or empty
   */
  public Optional<String> payload() {
    return Optional.ofNullable(payload);
  }

  /**
   * The idempotency key the task was created with.
   *
   * @return the key, or empty
   */
  public Optional<String> key() {
    return Optional.ofNullable(key);
  }

  /**
   * The task's priority (higher ones are pulled first).
   *
   * @return −1000 to 1000
   */
  public int priority() {
    return priority;
  }

  /**
   * When this attempt was due.
   *
   * @return the due time
   */
  public Instant dueAt() {
    return dueAt;
  }

  /**
   * When the lease ends unless extended: the task is then delivered again.
   *
   * @return the lease's end as the pull set it
   */
  public Instant leaseExpiresAt() {
    return leaseExpiresAt;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof PulledTask)) {
      return false;
    }
    PulledTask p = (PulledTask) o;
    return task == p.task && attempt == p.attempt && priority == p.priority
        && lease.equals(p.lease) && Objects.equals(payload, p.payload)
        && Objects.equals(key, p.key) && dueAt.equals(p.dueAt)
        && leaseExpiresAt.equals(p.leaseExpiresAt);
  }

  @Override
  public int hashCode() {
    return Objects.hash(task, attempt, lease);
  }

  @Override
  public String toString() {
    return "PulledTask{task=" + task + ", attempt=" + attempt + ", lease=" + lease
        + (key != null ? ", key=" + key : "") + ", priority=" + priority
        + (payload != null ? ", payload=" + Task.abbreviate(payload) : "")
        + ", dueAt=" + dueAt + ", leaseExpiresAt=" + leaseExpiresAt + "}";
  }
}
