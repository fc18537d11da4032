package io.rota.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * Extends the leases of a batch's unfinished tasks every interval (a fraction of the lease)
 * until each is released (its handler returned) or the keeper is stopped.
 */
final class LeaseKeeper {
  private final RotaClient client;
  private final Duration lease;
  private final Map<Long, PulledTask> held = new ConcurrentHashMap<>();
  private ScheduledFuture<?> schedule;

  LeaseKeeper(RotaClient client, List<PulledTask> batch, Duration lease) {
    this.client = client;
    this.lease = lease;
    batch.forEach(item -> held.put(item.task(), item));
  }

  void start(ScheduledExecutorService on, Duration every) {
    long ms = every.toMillis();
    schedule = on.scheduleWithFixedDelay(this::extendHeld, ms, ms, TimeUnit.MILLISECONDS);
  }

  void release(long task) {
    held.remove(task);
  }

  void stop() {
    if (schedule != null) {
      schedule.cancel(false);
    }
    held.clear();
  }

  private void extendHeld() {
    for (PulledTask item : held.values()) {
      if (!held.containsKey(item.task())) {
        continue;
      }
      try {
        client.extend(item.task(), item.lease(), lease);
      } catch (RotaApiException e) {
        if (e.isLeaseLost()) {
          if (held.remove(item.task()) != null) {
            ConsumeLoop.LOG.log(Level.WARNING, "rota: lease of task " + item.task() + " (attempt "
                + item.attempt() + ") lost while it was being handled; it will be delivered "
                + "again: " + e.error());
          }
        } else {
          ConsumeLoop.LOG.log(Level.WARNING, "rota: extending the lease of task " + item.task()
              + " failed: " + e.getMessage());
        }
      } catch (RuntimeException e) {
        // The keeper must never die silently mid-batch: log and try again next time.
        ConsumeLoop.LOG.log(Level.WARNING,
            "rota: extending the lease of task " + item.task() + " failed", e);
      }
    }
  }
}
