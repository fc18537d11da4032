package io.rota.client;

import java.io.PrintStream;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The README's example: a queue of "close order" tasks, produced and consumed. Against a
 * server started with {@code ROTA_API_TOKEN=secret rota standalone}:
 *
 * <pre>
 * ROTA_SERVER=http://127.0.0.1:8080 ROTA_API_TOKEN=secret \
 *   mvn -q test-compile org.codehaus.mojo:exec-maven-plugin:3.5.0:java \
 *   -Dexec.mainClass=io.rota.client.Example -Dexec.classpathScope=test
 * </pre>
 */
public final class Example {
  private Example() {}

  /**
   * Runs the example against {@code ROTA_SERVER} (default {@code http://127.0.0.1:8080}) with
   * the token {@code ROTA_API_TOKEN}.
   *
   * @param args none
   * @throws InterruptedException if interrupted while waiting for the consumer
   */
  public static void main(String[] args) throws InterruptedException {
    String server = System.getenv().getOrDefault("ROTA_SERVER", "http://127.0.0.1:8080");
    RotaClient rota = RotaClient.builder(server).token(System.getenv("ROTA_API_TOKEN")).build();
    run(rota, System.out);
  }

  /**
   * Makes the pull job (once), creates a task and consumes it.
   *
   * @param rota the client
   * @param out where to print what happens
   * @return the task, as it ended
   * @throws InterruptedException if interrupted while waiting for the consumer
   */
  static Task run(RotaClient rota, PrintStream out) throws InterruptedException {
    // Once: a pull job (no plugin; consumers take its tasks). A 409: it exists already.
    try {
      rota.request("POST", "/api/v1/jobs", Map.of(
          "name", "close-order-q", "app", "shop", "schedule", Map.of("kind", "none"),
          "delivery", Map.of("kind", "pull"), "max_attempts", 5));
    } catch (RotaApiException e) {
      if (!e.isConflict()) {
        throw e;
      }
    }

    // Producer: close order 42 in 2 seconds. The key dedupes: a retried create returns the
    // same task (created() is false).
    Task task = rota.createTask(NewTask.builder("close-order-q")
        .payload("{\"order_id\":42}").delay(Duration.ofSeconds(2)).key("order-42").build());
    out.println("task " + task.id() + " " + task.statusName() + ", due " + task.dueAt()
        + (task.created() ? " (new)" : " (existing)"));
    if (task.status() != TaskStatus.PENDING && task.status() != TaskStatus.FAILED) {
      return task; // a second run: order 42 was closed already
    }

    // Consumer: returning acks the task, throwing nacks it (retried per the job's backoff);
    // the lease is extended in the background while the handler runs.
    CountDownLatch closed = new CountDownLatch(1);
    ConsumerHandle consumer = rota.consume("close-order-q", pulled -> {
      out.println("closing order " + pulled.payload().orElse("?") + " (task " + pulled.task()
          + ", attempt " + pulled.attempt() + ")");
      // ... idempotently: UPDATE orders SET state='closed' WHERE id=? AND state='open'
      closed.countDown();
    }, ConsumeOptions.builder().consumer("billing-1").maxWait(Duration.ofSeconds(5)).build());
    try {
      if (!closed.await(30, TimeUnit.SECONDS)) {
        out.println("no task came within 30 s");
      }
    } finally {
      consumer.close(); // stops it once its batch is acked
    }

    Task done = rota.getTask(task.id());
    out.println("task " + done.id() + " " + done.statusName());
    return done;
  }
}
