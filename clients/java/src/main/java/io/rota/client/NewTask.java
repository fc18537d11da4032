package io.rota.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.time.Instant;
import java.util.Objects;

/**
 * A task to create, for {@link RotaClient#createTask} or {@link RotaClient#createTasks}:
 * {@code NewTask.builder("close-order").delay(Duration.ofMinutes(30)).key("order-42")
 * .payload("{\"order_id\":42}").build()}. Immutable.
 *
 * <p>A task is due now, after a delay (counted from when the server accepts it) or at a time
 * ({@code runAt} in the past: now); giving both a delay and a time is a 422. Values are checked
 * by the server, whose 422 names the field ({@link RotaApiException#field()}).
 */
public final class NewTask {
  private final Object job;
  private final String payload;
  private final Long delayMs;
  private final Instant runAt;
  private final String key;
  private final Integer maxAttempts;
  private final Integer priority;
  private final Backoff backoff;

  private NewTask(Builder b) {
    this.job = b.job;
    this.payload = b.payload;
    this.delayMs = b.delayMs;
    this.runAt = b.runAt;
    this.key = b.key;
    this.maxAttempts = b.maxAttempts;
    this.priority = b.priority;
    this.backoff = b.backoff;
  }

  /**
   * A task of the job named {@code job}, due now unless told otherwise.
   *
   * @param job the job's name
   * @return a builder
   */
  public static Builder builder(String job) {
    return new Builder(Objects.requireNonNull(job, "job"));
  }

  /**
   * A task of the job with id {@code jobId}, due now unless told otherwise.
   *
   * @param jobId the job's id
   * @return a builder
   */
  public static Builder builder(long jobId) {
    return new Builder(jobId);
  }

  /**
   * A task of {@code job} due now, without payload: {@code builder(job).build()}.
   *
   * @param job the job's name
   * @return the task to create
   */
  public static NewTask of(String job) {
    return builder(job).build();
  }

  ObjectNode toJson() {
    ObjectNode json = Json.object();
    if (job instanceof Long) {
      json.put("job", (Long) job);
    } else {
      json.put("job", (String) job);
    }
    if (payload != null) {
      json.put("payload", payload);
    }
    if (delayMs != null) {
      json.put("delay_ms", delayMs);
    }
    if (runAt != null) {
      json.put("run_at", Json.formatTime(runAt));
    }
    if (key != null) {
      json.put("key", key);
    }
    if (maxAttempts != null) {
      json.put("max_attempts", maxAttempts);
    }
    if (priority != null) {
      json.put("priority", priority);
    }
    if (backoff != null) {
      json.set("backoff", backoff.toJson());
    }
    return json;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof NewTask && toJson().equals(((NewTask) o).toJson());
  }

  @Override
  public int hashCode() {
    return toJson().hashCode();
  }

  @Override
  public String toString() {
    return "NewTask" + toJson();
  }

  /** Builds a {@link NewTask}; every setting is optional. Not thread-safe. */
  public static final class Builder {
    private final Object job;
    private String payload;
    private Long delayMs;
    private Instant runAt;
    private String key;
    private Integer maxAttempts;
    private Integer priority;
    private Backoff backoff;

    private Builder(Object job) {
      this.job = job;
    }

    /**
     * The run's input (UTF-8 text, at most 64 KiB by default; more is a 413). For a JSON
     * payload, pass its text.
     *
     * @param payload the payload, or {@code null} for none
     * @return this builder
     */
    public Builder payload(String payload) {
      this.payload = payload;
      return this;
    }

    /**
     * Due this long after the server accepts the task; not with {@link #runAt}.
     *
     * @param delay the delay (millisecond precision)
     * @return this builder
     */
    public Builder delay(Duration delay) {
      this.delayMs = delay == null ? null : delay.toMillis();
      return this;
    }

    /**
     * Due this many milliseconds after the server accepts the task; not with {@link #runAt}.
     *
     * @param delayMs the delay in milliseconds
     * @return this builder
     */
    public Builder delayMs(long delayMs) {
      this.delayMs = delayMs;
      return this;
    }

    /**
     * Due at this time (sent in UTC with millisecond precision; in the past: now; more than
     * 10 years ahead is a 422); not with {@link #delay}.
     *
     * @param runAt the due time, or {@code null} to unset it
     * @return this builder
     */
    public Builder runAt(Instant runAt) {
      this.runAt = runAt;
      return this;
    }

    /**
     * An idempotency key: creating a task whose key the job already has returns the existing
     * task (200, {@link Task#created()} false) instead of a new one.
     *
     * @param key up to 200 characters, or {@code null} for none
     * @return this builder
     */
    public Builder key(String key) {
      this.key = key;
      return this;
    }

    /**
     * The task's attempt budget (1 to 100) instead of the job's.
     *
     * @param maxAttempts attempts before the task is {@code dead}
     * @return this builder
     */
    public Builder maxAttempts(int maxAttempts) {
      this.maxAttempts = maxAttempts;
      return this;
    }

    /**
     * −1000 to 1000 (0 by default): a pull hands out higher priorities first.
     *
     * @param priority the priority
     * @return this builder
     */
    public Builder priority(int priority) {
      this.priority = priority;
      return this;
    }

    /**
     * The task's backoff between attempts instead of the job's.
     *
     * @param backoff the backoff, or {@code null} for the job's
     * @return this builder
     */
    public Builder backoff(Backoff backoff) {
      this.backoff = backoff;
      return this;
    }

    /**
     * The task to create.
     *
     * @return an immutable {@link NewTask}
     */
    public NewTask build() {
      return new NewTask(this);
    }
  }
}
