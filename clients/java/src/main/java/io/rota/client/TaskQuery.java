package io.rota.client;

import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Filters of {@link RotaClient#listTasks}: {@code TaskQuery.builder().job("orders")
 * .status(TaskStatus.DEAD).limit(100).build()}. Every filter is optional; {@link #all()} has
 * none. Pages are newest first; pass a page's {@link Page#next()} as {@link Builder#after} for
 * the next one. Immutable.
 */
public final class TaskQuery {
  private final Map<String, String> params;

  private TaskQuery(Map<String, String> params) {
    this.params = params;
  }

  /**
   * No filter: the newest 50 tasks the token may see.
   *
   * @return the query
   */
  public static TaskQuery all() {
    return builder().build();
  }

  /**
   * A query to fill in.
   *
   * @return a builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /** The query string's parameters, in order; already checked to be non-null. */
  Map<String, String> params() {
    return params;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof TaskQuery && params.equals(((TaskQuery) o).params);
  }

  @Override
  public int hashCode() {
    return params.hashCode();
  }

  @Override
  public String toString() {
    return "TaskQuery" + params;
  }

  /** Builds a {@link TaskQuery}. Not thread-safe. */
  public static final class Builder {
    private final Map<String, String> params = new LinkedHashMap<>();

    private Builder() {}

    private Builder set(String name, String value) {
      if (value == null) {
        params.remove(name);
      } else {
        params.put(name, value);
      }
      return this;
    }

    /**
     * Only this job's tasks.
     *
     * @param job the job's name (or its id as text)
     * @return this builder
     */
    public Builder job(String job) {
      return set("job", job);
    }

    /**
     * Only this job's tasks.
     *
     * @param jobId the job's id
     * @return this builder
     */
    public Builder job(long jobId) {
      return set("job", Long.toString(jobId));
    }

    /**
     * Only tasks in this status.
     *
     * @param status the status ({@link TaskStatus#UNKNOWN} is not a filter)
     * @return this builder
     */
    public Builder status(TaskStatus status) {
      if (status == TaskStatus.UNKNOWN) {
        throw new IllegalArgumentException("UNKNOWN is not a status to filter on");
      }
      return set("status", status == null ? null : status.wireName());
    }

    /**
     * Only the task created with this key.
     *
     * @param key the key
     * @return this builder
     */
    public Builder key(String key) {
      return set("key", key);
    }

    /**
     * Only tasks due at or after this time.
     *
     * @param at the earliest due time
     * @return this builder
     */
    public Builder dueAfter(Instant at) {
      return set("due_after", at == null ? null : Json.formatTime(at));
    }

    /**
     * Only tasks due before this time.
     *
     * @param at the due time the tasks are before
     * @return this builder
     */
    public Builder dueBefore(Instant at) {
      return set("due_before", at == null ? null : Json.formatTime(at));
    }

    /**
     * Tasks per page: 50 by default; more than 1,000 is capped at 1,000.
     *
     * @param limit at least 1
     * @return this builder
     */
    public Builder limit(int limit) {
      return set("limit", Integer.toString(limit));
    }

    /**
     * The page after the one whose {@link Page#next()} this is.
     *
     * @param cursor a cursor from a previous page, or {@code null} for the first page
     * @return this builder
     */
    public Builder after(String cursor) {
      return set("after", cursor);
    }

    /**
     * The query.
     *
     * @return an immutable {@link TaskQuery}
     */
    public TaskQuery build() {
      return new TaskQuery(java.util.Collections.unmodifiableMap(new LinkedHashMap<>(params)));
    }
  }
}
