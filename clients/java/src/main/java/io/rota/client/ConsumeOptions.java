package io.rota.client;

import java.time.Duration;
import java.util.Objects;

/**
 * How {@link RotaClient#consume} consumes: {@link #defaults()} long-polls for up to 10 tasks
 * at a time with 30 s leases, waiting up to 20 s per pull, runs the handler on one worker
 * thread and extends each unfinished task's lease every third of the lease. Immutable.
 */
public final class ConsumeOptions {
  private final String consumer;
  private final int max;
  private final Duration lease;
  private final Duration maxWait;
  private final int concurrency;
  private final double extendFraction;

  private ConsumeOptions(Builder b) {
    this.consumer = b.consumer;
    this.max = b.max;
    this.lease = b.lease;
    this.maxWait = b.maxWait;
    this.concurrency = b.concurrency;
    this.extendFraction = b.extendFraction;
  }

  /**
   * The defaults: up to 10 tasks a pull, 30 s leases, 20 s long polls, one worker, leases
   * extended every third of the lease.
   *
   * @return the options
   */
  public static ConsumeOptions defaults() {
    return builder().build();
  }

  /**
   * Options to fill in, starting from the {@link #defaults()}.
   *
   * @return a builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * The consumer's name ({@code pull:<consumer>} on its runs), if set.
   *
   * @return the name, or {@code null}
   */
  public String consumer() {
    return consumer;
  }

  /**
   * The most tasks one pull takes.
   *
   * @return 1 to 1,000
   */
  public int max() {
    return max;
  }

  /**
   * Each task's lease, extended while its handler runs.
   *
   * @return the lease
   */
  public Duration lease() {
    return lease;
  }

  /**
   * How long one pull waits for a task to fall due: also about how long {@link
   * ConsumerHandle#stop()} may take to be noticed while idle.
   *
   * @return the long poll's wait
   */
  public Duration maxWait() {
    return maxWait;
  }

  /**
   * How many handlers run at once (worker threads).
   *
   * @return at least 1
   */
  public int concurrency() {
    return concurrency;
  }

  /**
   * How often leases are extended, as a fraction of the lease.
   *
   * @return between 0 and 1, exclusive
   */
  public double extendFraction() {
    return extendFraction;
  }

  /** The interval between two extensions of a held lease (at least 100 ms). */
  Duration extendInterval() {
    return Duration.ofMillis(Math.max(100, (long) (lease.toMillis() * extendFraction)));
  }

  PullOptions pullOptions() {
    PullOptions.Builder b = PullOptions.builder().max(max).lease(lease).maxWait(maxWait);
    if (consumer != null) {
      b.consumer(consumer);
    }
    return b.build();
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof ConsumeOptions)) {
      return false;
    }
    ConsumeOptions c = (ConsumeOptions) o;
    return Objects.equals(consumer, c.consumer) && max == c.max && lease.equals(c.lease)
        && maxWait.equals(c.maxWait) && concurrency == c.concurrency
        && Double.compare(extendFraction, c.extendFraction) == 0;
  }

  @Override
  public int hashCode() {
    return Objects.hash(consumer, max, lease, maxWait, concurrency, extendFraction);
  }

  @Override
  public String toString() {
    return "ConsumeOptions{consumer=" + consumer + ", max=" + max + ", lease=" + lease
        + ", maxWait=" + maxWait + ", concurrency=" + concurrency
        + ", extendFraction=" + extendFraction + "}";
  }

  /** Builds {@link ConsumeOptions}. Not thread-safe. */
  public static final class Builder {
    private String consumer;
    private int max = 10;
    private Duration lease = Duration.ofSeconds(30);
    private Duration maxWait = Duration.ofSeconds(20);
    private int concurrency = 1;
    private double extendFraction = 1.0 / 3;

    private Builder() {}

    /**
     * The consumer's name, shown as its runs' executor {@code pull:<consumer>}.
     *
     * @param consumer up to 100 characters
     * @return this builder
     */
    public Builder consumer(String consumer) {
      this.consumer = consumer;
      return this;
    }

    /**
     * The most tasks one pull takes (1 to 1,000; 10 by default). A batch is handled before
     * the next pull.
     *
     * @param max the batch size
     * @return this builder
     */
    public Builder max(int max) {
      if (max < 1) {
        throw new IllegalArgumentException("max must be at least 1, not " + max);
      }
      this.max = max;
      return this;
    }

    /**
     * Each task's lease (1 s to 12 h; 30 s by default). A handler may take longer: the lease
     * is extended while it runs; a shorter lease redelivers sooner after a crash.
     *
     * @param lease the lease
     * @return this builder
     */
    public Builder lease(Duration lease) {
      this.lease = Objects.requireNonNull(lease, "lease");
      return this;
    }

    /**
     * How long one pull waits for a task to fall due (up to 30 s; 20 s by default).
     *
     * @param maxWait the long poll's wait
     * @return this builder
     */
    public Builder maxWait(Duration maxWait) {
      this.maxWait = Objects.requireNonNull(maxWait, "maxWait");
      return this;
    }

    /**
     * How many handlers run at once, each on its own worker thread (1 by default: one task
     * after the other).
     *
     * @param concurrency at least 1
     * @return this builder
     */
    public Builder concurrency(int concurrency) {
      if (concurrency < 1) {
        throw new IllegalArgumentException("concurrency must be at least 1, not " + concurrency);
      }
      this.concurrency = concurrency;
      return this;
    }

    /**
     * How often the leases of unfinished tasks are extended, as a fraction of the lease (⅓ by
     * default: a 30 s lease is extended every 10 s, so two extensions may fail before the
     * lease ends).
     *
     * @param fraction between 0 and 1, exclusive
     * @return this builder
     */
    public Builder extendFraction(double fraction) {
      if (!(fraction > 0 && fraction < 1)) {
        throw new IllegalArgumentException("extendFraction must be between 0 and 1, not " + fraction);
      }
      this.extendFraction = fraction;
      return this;
    }

    /**
     * The options.
     *
     * @return immutable {@link ConsumeOptions}
     */
    public ConsumeOptions build() {
      return new ConsumeOptions(this);
    }
  }
}
