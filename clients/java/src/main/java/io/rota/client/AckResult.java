package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Locale;
import java.util.Objects;

/**
 * What became of one item of {@link RotaClient#ackBatch}: acked, stale (the lease is not the
 * task's current one: it expired, or its attempt already ended) or not found (no such task of
 * this job). Immutable.
 */
public final class AckResult {
  /** The outcome of one ack of a batch. */
  public enum Status {
    /** The task is {@code succeeded}. */
    ACKED,
    /** The lease is not the task's current one; nothing changed. */
    STALE,
    /** No such task of this job. */
    NOT_FOUND,
    /** An outcome this client does not know (a newer server's). */
    UNKNOWN;

    static Status fromWire(String name) {
      for (Status s : values()) {
        if (s != UNKNOWN && s.name().toLowerCase(Locale.ROOT).equals(name)) {
          return s;
        }
      }
      return UNKNOWN;
    }
  }

  private final long task;
  private final Status status;
  private final String statusName;

  AckResult(long task, String statusName) {
    this.task = task;
    this.statusName = statusName;
    this.status = Status.fromWire(statusName);
  }

  static AckResult fromJson(JsonNode json) {
    return new AckResult(Json.requiredLong(json, "task"), Json.requiredText(json, "status"));
  }

  /**
   * The task's id, as sent.
   *
   * @return the id
   */
  public long task() {
    return task;
  }

  /**
   * What became of the ack.
   *
   * @return the outcome
   */
  public Status status() {
    return status;
  }

  /**
   * The outcome as the API names it: {@code acked}, {@code stale} or {@code not_found}.
   *
   * @return the outcome's name
   */
  public String statusName() {
    return statusName;
  }

  /**
   * Whether the task is now {@code succeeded}.
   *
   * @return true if it was acked
   */
  public boolean acked() {
    return status == Status.ACKED;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof AckResult)) {
      return false;
    }
    AckResult r = (AckResult) o;
    return task == r.task && statusName.equals(r.statusName);
  }

  @Override
  public int hashCode() {
    return Objects.hash(task, statusName);
  }

  @Override
  public String toString() {
    return "AckResult{task=" + task + ", status=" + statusName + "}";
  }
}
