package io.rota.client;

import java.util.Locale;

/** Where a task is: {@link #FAILED} will be retried, {@link #DEAD} will not. */
public enum TaskStatus {
  /** Waiting for its due time (or for a consumer to pull it). */
  PENDING,
  /** Due, but waiting for a slot of the job's concurrency or rate limit; no attempt spent. */
  THROTTLED,
  /** An attempt is running (for a pull job: leased to a consumer). */
  RUNNING,
  /** An attempt succeeded (for a pull job: it was acked). */
  SUCCEEDED,
  /** An attempt failed and a retry is due (at {@link Task#dueAt()}). */
  FAILED,
  /** The last attempt failed: it will not be retried unless re-driven. */
  DEAD,
  /** Cancelled before it started. */
  CANCELLED,
  /** A status this client does not know (a newer server's); see {@link Task#statusName()}. */
  UNKNOWN;

  /**
   * The name the API uses.
   *
   * @return e.g. {@code pending}
   */
  public String wireName() {
    return name().toLowerCase(Locale.ROOT);
  }

  /**
   * The status the API calls {@code name}.
   *
   * @param name e.g. {@code succeeded}
   * @return the status, {@link #UNKNOWN} for a name this client does not know
   */
  public static TaskStatus fromWire(String name) {
    for (TaskStatus s : values()) {
      if (s != UNKNOWN && s.wireName().equals(name)) {
        return s;
      }
    }
    return UNKNOWN;
  }
}
