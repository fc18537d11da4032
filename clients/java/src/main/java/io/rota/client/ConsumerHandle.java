package io.rota.client;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * A running consumer, as {@link RotaClient#consume} started it: stop it with {@link #stop()}
 * (returns at once) or {@link #close()} (stops and waits until it has ended). Thread-safe.
 *
 * <p>A stop is noticed between batches: a pull in flight (at most {@link
 * ConsumeOptions#maxWait()}) completes and the tasks it brought are handled, acked or nacked
 * first, so no leased task is left to expire.
 */
public final class ConsumerHandle implements AutoCloseable {
  private final ConsumeLoop loop;
  private final Thread thread;

  ConsumerHandle(ConsumeLoop loop, Thread thread) {
    this.loop = loop;
    this.thread = thread;
  }

  /** Asks the consumer to stop after its current batch; does not wait. Idempotent. */
  public void stop() {
    loop.stop();
  }

  /**
   * Stops the consumer and waits until it has ended (its current pull answered and its batch
   * handled). Called from a handler it only stops (waiting there would wait for itself). If the
   * calling thread is interrupted meanwhile, it returns at once with the interrupt flag set;
   * the consumer still ends on its own.
   */
  @Override
  public void close() {
    stop();
    if (loop.isOwnThread()) {
      return;
    }
    try {
      awaitTermination();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Waits until the consumer has ended (stopped, or ended by a {@link #failure()}).
   *
   * @throws InterruptedException if the calling thread is interrupted while waiting
   * @throws IllegalStateException if called from one of the consumer's own handlers
   */
  public void awaitTermination() throws InterruptedException {
    if (loop.isOwnThread()) {
      throw new IllegalStateException("a consumer's handler cannot wait for its own consumer to end");
    }
    thread.join();
  }

  /**
   * Waits up to {@code timeout} for the consumer to end.
   *
   * @param timeout the longest wait
   * @return true if it has ended, false if it still runs
   * @throws InterruptedException if the calling thread is interrupted while waiting
   */
  public boolean awaitTermination(Duration timeout) throws InterruptedException {
    thread.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(timeout.toNanos())));
    return !thread.isAlive();
  }

  /**
   * Whether the consumer still runs.
   *
   * @return false once it has ended
   */
  public boolean isRunning() {
    return thread.isAlive();
  }

  /**
   * How many tasks the handler was given and finished (successfully or not).
   *
   * @return the count so far
   */
  public long handled() {
    return loop.succeeded() + loop.failed();
  }

  /**
   * How many tasks the handler finished without an exception (each then acked).
   *
   * @return the count so far
   */
  public long succeeded() {
    return loop.succeeded();
  }

  /**
   * How many tasks the handler failed with an exception (each then nacked).
   *
   * @return the count so far
   */
  public long failed() {
    return loop.failed();
  }

  /**
   * Why the consumer ended by itself: a pull the server refused with a 4xx (a wrong token,
   * an unknown job, a job that is not a pull job, an invalid option) or a handler's
   * {@link Error}. Pulls that get no answer or a 5xx are retried, not fatal.
   *
   * @return the cause, or empty while it runs or if it was stopped
   */
  public Optional<Throwable> failure() {
    return Optional.ofNullable(loop.failure());
  }

  @Override
  public String toString() {
    return "ConsumerHandle{" + thread.getName() + (isRunning() ? ", running" : ", ended")
        + ", handled=" + handled() + "}";
  }
}
