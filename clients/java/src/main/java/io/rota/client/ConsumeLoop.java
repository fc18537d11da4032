package io.rota.client;

import java.lang.System.Logger;
import java.lang.System.Logger.Level;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The loop behind {@link ConsumerHandle}: pull a batch, hand each task to a worker, keep the
 * batch's leases alive while they work ({@link LeaseKeeper}), ack or nack each, repeat until
 * stopped. Runs on its own thread.
 */
final class ConsumeLoop implements Runnable {
  static final Logger LOG = System.getLogger("io.rota.client");

  /** Longest error text sent with a nack (the rest of a huge exception text is dropped). */
  private static final int MAX_ERROR_CHARS = 4000;
  /** Pauses between tries of an ack or nack that got no answer (or a 5xx). */
  private static final long[] FINISH_PAUSES_MS = {200, 500, 1000};
  private static final long FIRST_PULL_PAUSE_MS = 500;
  private static final long LONGEST_PULL_PAUSE_MS = 10_000;

  private final RotaClient client;
  private final String job;
  private final OutputHandler handler;
  private final ConsumeOptions options;
  private final PullOptions pull;
  /** The loop whose poller or worker the current thread is, if any. */
  private static final ThreadLocal<ConsumeLoop> OWN_THREAD = new ThreadLocal<>();

  private final CountDownLatch stopSignal = new CountDownLatch(1);
  private final AtomicLong succeeded = new AtomicLong();
  private final AtomicLong failed = new AtomicLong();
  private volatile Throwable failure;

  ConsumeLoop(RotaClient client, String job, OutputHandler handler, ConsumeOptions options) {
    this.client = client;
    this.job = job;
    this.handler = handler;
    this.options = options;
    this.pull = options.pullOptions();
  }

  void stop() {
    stopSignal.countDown();
  }

  /** Whether the calling thread is this loop's poller or one of its workers. */
  boolean isOwnThread() {
    return OWN_THREAD.get() == this;
  }

  private boolean stopped() {
    return stopSignal.getCount() == 0;
  }

  long succeeded() {
    return succeeded.get();
  }

  long failed() {
    return failed.get();
  }

  Throwable failure() {
    return failure;
  }

  @Override
  public void run() {
    OWN_THREAD.set(this);
    ExecutorService workers = Executors.newFixedThreadPool(options.concurrency(),
        threads("rota-consumer-" + job + "-worker", false, this));
    ScheduledExecutorService keeperThread =
        Executors.newSingleThreadScheduledExecutor(threads("rota-lease-keeper-" + job, true, null));
    try {
      long pause = FIRST_PULL_PAUSE_MS;
      while (!stopped()) {
        List<PulledTask> batch;
        try {
          batch = client.pull(job, pull);
        } catch (RotaConnectionException | RotaApiException e) {
          if (e instanceof RotaApiException && !((RotaApiException) e).isServerError()) {
            LOG.log(Level.ERROR, "rota consume " + job + ": pull refused, stopping: " + e.getMessage());
            failure = e;
            return;
          }
          LOG.log(Level.WARNING, "rota consume " + job + ": pull failed, trying again in " + pause
              + " ms: " + e.getMessage());
          if (awaitStop(pause)) {
            return;
          }
          pause = Math.min(pause * 2, LONGEST_PULL_PAUSE_MS);
          continue;
        }
        pause = FIRST_PULL_PAUSE_MS;
        if (!batch.isEmpty()) {
          handleBatch(batch, workers, keeperThread);
        }
      }
    } catch (RuntimeException | Error e) {
      LOG.log(Level.ERROR, "rota consume " + job + ": stopped by an unexpected error", e);
      failure = e;
    } finally {
      // Every task handed to a worker has finished: the pools end at once.
      workers.shutdown();
      keeperThread.shutdownNow();
      try {
        workers.awaitTermination(10, TimeUnit.SECONDS);
        keeperThread.awaitTermination(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Waits up to {@code millis} for a stop; true if stopped. */
  private boolean awaitStop(long millis) {
    try {
      return stopSignal.await(millis, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      stop();
      return true;
    }
  }

  private void handleBatch(
      List<PulledTask> batch, ExecutorService workers, ScheduledExecutorService keeperThread) {
    LeaseKeeper keeper = new LeaseKeeper(client, batch, options.lease());
    keeper.start(keeperThread, options.extendInterval());
    try {
      List<Future<?>> running = new ArrayList<>(batch.size());
      for (PulledTask item : batch) {
        running.add(workers.submit(() -> handleOne(item, keeper)));
      }
      boolean interrupted = false;
      for (Future<?> f : running) {
        while (true) {
          try {
            f.get();
            break;
          } catch (InterruptedException e) {
            interrupted = true; // finish the batch: its tasks are leased to us
          } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            LOG.log(Level.ERROR, "rota consume " + job + ": a worker failed", cause);
            break;
          }
        }
      }
      if (interrupted) {
        Thread.currentThread().interrupt();
        stop();
      }
    } finally {
      keeper.stop();
    }
  }

  private void handleOne(PulledTask item, LeaseKeeper keeper) {
    Object output = null;
    Throwable thrown = null;
    try {
      output = handler.handle(item);
      if (output != null) {
        output = Json.toTree(output); // an output that is not JSON fails the attempt
      }
    } catch (Throwable t) {
      thrown = t;
    }
    keeper.release(item.task());
    if (thrown == null) {
      succeeded.incrementAndGet();
      finish(item, output, null);
    } else {
      failed.incrementAndGet();
      finish(item, null, errorText(thrown));
      if (thrown instanceof Error) {
        failure = thrown;
        stop();
      }
    }
  }

  static String errorText(Throwable t) {
    String message = t.getMessage();
    String text = t.getClass().getSimpleName() + (message == null ? "" : ": " + message);
    return text.length() <= MAX_ERROR_CHARS ? text : text.substring(0, MAX_ERROR_CHARS);
  }

  /** Acks ({@code error} null) or nacks {@code item}, trying again when no answer came. */
  private void finish(PulledTask item, Object output, String error) {
    String verb = error == null ? "ack" : "nack";
    String what = verb + " of task " + item.task() + " (attempt " + item.attempt() + ")";
    for (int attempt = 0; ; attempt++) {
      RotaException failed;
      try {
        if (error == null) {
          client.ack(item.task(), item.lease(), output);
        } else {
          client.nack(item.task(), item.lease(), error);
        }
        return;
      } catch (RotaApiException e) {
        if (e.isLeaseLost()) {
          // After a retry this may be our own first ack, which did land.
          LOG.log(Level.WARNING, "rota: " + what + " refused, it will be delivered again unless "
              + "an earlier " + verb + " landed: " + e.error());
          return;
        }
        if (!e.isServerError()) {
          LOG.log(Level.ERROR, "rota: " + what + " refused: " + e.getMessage());
          return;
        }
        failed = e;
      } catch (RotaConnectionException e) {
        failed = e;
      }
      if (attempt >= FINISH_PAUSES_MS.length) {
        LOG.log(Level.ERROR, "rota: " + what + " failed " + (attempt + 1) + " times, the task will "
            + "be delivered again when its lease expires: " + failed.getMessage());
        return;
      }
      try {
        Thread.sleep(FINISH_PAUSES_MS[attempt]);
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        LOG.log(Level.ERROR, "rota: " + what + " interrupted; the task will be delivered again "
            + "when its lease expires: " + failed.getMessage());
        return;
      }
    }
  }

  /** Threads named {@code name-N}; those of {@code owner} know it ({@link #isOwnThread}). */
  private static ThreadFactory threads(String name, boolean daemon, ConsumeLoop owner) {
    AtomicInteger n = new AtomicInteger();
    return r -> {
      Runnable body = owner == null ? r : () -> {
        OWN_THREAD.set(owner);
        r.run();
      };
      Thread t = new Thread(body, name + "-" + n.incrementAndGet());
      t.setDaemon(daemon);
      return t;
    };
  }
}
