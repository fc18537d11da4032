package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** The consumer loop: acks, nacks, keeps leases, stops, against a real server. */
@ExtendWith(RotaServerExtension.class)
class ConsumeTest {
  /** Hang guard only. */
  private static final long PATIENCE_S = 30;

  private static void await(CountDownLatch latch, String what) throws InterruptedException {
    assertTrue(latch.await(PATIENCE_S, TimeUnit.SECONDS), what);
  }

  /** Once closed, none of a consumer's threads (poller, workers, lease keeper) is left. */
  private static void assertNoThreadsOf(String job) {
    Set<String> left = Thread.getAllStackTraces().keySet().stream()
        .filter(Thread::isAlive)
        .map(Thread::getName)
        .filter(n -> n.equals("rota-consumer-" + job) || n.startsWith("rota-consumer-" + job + "-")
            || n.startsWith("rota-lease-keeper-" + job + "-"))
        .collect(Collectors.toSet());
    assertEquals(Set.of(), left);
  }

  @Test
  void acksWhatSucceedsAndNacksWhatThrows(RotaClient rota, RotaServer server) throws Exception {
    String job = server.newPullJob();
    List<Long> ids = rota.createTasks(List.of(
        NewTask.builder(job).payload("a").key("a").build(),
        NewTask.builder(job).payload("b").key("b").build(),
        NewTask.builder(job).payload("c").key("c").build()));
    List<String> seen = Collections.synchronizedList(new ArrayList<>());
    Set<String> succeeded = Collections.synchronizedSet(new HashSet<>());
    AtomicBoolean failedOnce = new AtomicBoolean();
    CountDownLatch allDone = new CountDownLatch(1);

    ConsumerHandle consumer = rota.consume(job, task -> {
      String payload = task.payload().orElse("?");
      seen.add(payload + task.attempt());
      if (payload.equals("b") && failedOnce.compareAndSet(false, true)) {
        throw new IllegalStateException("b is not ready");
      }
      succeeded.add(payload);
      if (succeeded.size() == 3) {
        allDone.countDown();
      }
    }, ConsumeOptions.builder().consumer("java-test").lease(Duration.ofSeconds(5))
        .maxWait(Duration.ofSeconds(1)).build());
    try {
      await(allDone, "the consumer never succeeded with a, b and c: " + seen);
    } finally {
      consumer.close();
    }
    assertFalse(consumer.isRunning());
    assertEquals(Optional.empty(), consumer.failure());
    assertEquals(4, consumer.handled());
    assertEquals(3, consumer.succeeded());
    assertEquals(1, consumer.failed());
    assertEquals(List.of("a1", "b1", "b2", "c1"), seen.stream().sorted().collect(Collectors.toList()));
    for (long id : ids) {
      assertEquals(TaskStatus.SUCCEEDED, rota.getTask(id).status());
    }
    assertEquals(2, rota.getTask(ids.get(1)).attempts());

    JsonNode runs = server.runsOf(ids.get(1));
    List<String> byAttempt = new ArrayList<>();
    runs.forEach(r -> byAttempt.add(r.get("attempt").asInt() + " " + r.get("status").asText() + " "
        + r.get("executor").asText() + " " + r.path("message").asText("")));
    byAttempt.sort(null);
    assertEquals(List.of("1 failed pull:java-test IllegalStateException: b is not ready",
        "2 succeeded pull:java-test "), byAttempt);
    assertNoThreadsOf(job);
  }

  @Test
  void extendsLeasesWhileASlowHandlerWorks(RotaClient rota, RotaServer server) throws Exception {
    String job = server.newPullJob();
    // Due together, so that one pull likely takes both: the second then waits for the first's
    // 2.5 s as well, past its 1 s lease, before its own 2.5 s.
    Instant at = Instant.now().plusMillis(500);
    List<Long> ids = rota.createTasks(List.of(NewTask.builder(job).runAt(at).build(),
        NewTask.builder(job).runAt(at).build()));
    List<String> seen = Collections.synchronizedList(new ArrayList<>());
    CountDownLatch bothDone = new CountDownLatch(2);

    ConsumerHandle consumer = rota.consume(job, task -> {
      seen.add(task.task() + "/" + task.attempt());
      Thread.sleep(2500); // work: two and a half leases
      bothDone.countDown();
    }, ConsumeOptions.builder().lease(Duration.ofSeconds(1)).maxWait(Duration.ofSeconds(1)).build());
    try {
      await(bothDone, "the slow handler did not finish both tasks: " + seen);
    } finally {
      consumer.close();
    }
    assertEquals(Optional.empty(), consumer.failure());
    assertEquals(2, consumer.succeeded());
    // Each was handed out once, acked in time, and never redelivered meanwhile.
    assertEquals(ids.stream().map(id -> id + "/1").sorted().collect(Collectors.toList()),
        seen.stream().sorted().collect(Collectors.toList()));
    for (long id : ids) {
      Task task = rota.getTask(id);
      assertEquals(TaskStatus.SUCCEEDED, task.status());
      assertEquals(1, task.attempts());
      assertEquals(1, server.runsOf(id).size());
    }
    assertNoThreadsOf(job);
  }

  @Test
  void runsHandlersConcurrentlyWhenAsked(RotaClient rota, RotaServer server) throws Exception {
    String job = server.newPullJob();
    Instant at = Instant.now().plusMillis(500);
    List<NewTask> batch = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      batch.add(NewTask.builder(job).runAt(at).payload(Integer.toString(i)).build());
    }
    rota.createTasks(batch);
    // Each handler waits until all four run at once: only true concurrency gets them past.
    CountDownLatch together = new CountDownLatch(4);
    CountDownLatch done = new CountDownLatch(4);
    ConsumerHandle consumer = rota.consume(job, task -> {
      together.countDown();
      if (!together.await(PATIENCE_S, TimeUnit.SECONDS)) {
        throw new IllegalStateException("the four handlers never ran together");
      }
      done.countDown();
    }, ConsumeOptions.builder().concurrency(4).max(10).maxWait(Duration.ofSeconds(1)).build());
    try {
      await(done, "four handlers did not finish");
    } finally {
      consumer.close();
    }
    assertEquals(4, consumer.succeeded());
    assertEquals(0, consumer.failed());
  }

  @Test
  void stopsWhenAskedWhileIdle(RotaClient rota, RotaServer server) throws Exception {
    String job = server.newPullJob();
    ConsumerHandle consumer = rota.consume(job, task -> { },
        ConsumeOptions.builder().maxWait(Duration.ofMillis(500)).build());
    assertTrue(consumer.isRunning());
    consumer.stop();
    assertTrue(consumer.awaitTermination(Duration.ofSeconds(PATIENCE_S)), "did not stop");
    assertFalse(consumer.isRunning());
    assertEquals(0, consumer.handled());
    assertEquals(Optional.empty(), consumer.failure());
    consumer.close(); // idempotent
  }

  @Test
  void aHandlerMayCloseItsOwnConsumer(RotaClient rota, RotaServer server) throws Exception {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.of(job));
    AtomicReference<ConsumerHandle> self =
        new AtomicReference<>();
    CountDownLatch started = new CountDownLatch(1);
    ConsumerHandle consumer = rota.consume(job, t -> {
      assertTrue(started.await(PATIENCE_S, TimeUnit.SECONDS));
      self.get().close(); // only stops: waiting here would wait for itself
    }, ConsumeOptions.builder().maxWait(Duration.ofSeconds(1)).build());
    self.set(consumer);
    started.countDown();
    assertTrue(consumer.awaitTermination(Duration.ofSeconds(PATIENCE_S)), "did not end");
    assertEquals(1, consumer.succeeded());
    assertEquals(TaskStatus.SUCCEEDED, rota.getTask(task.id()).status());
    assertNoThreadsOf(job);
  }

  @Test
  void endsWithTheFailureOfAPullTheServerRefuses(RotaClient rota) throws Exception {
    ConsumerHandle consumer = rota.consume("no-such-job", task -> { }, ConsumeOptions.defaults());
    assertTrue(consumer.awaitTermination(Duration.ofSeconds(PATIENCE_S)), "did not end");
    Throwable failure = consumer.failure().orElseThrow();
    assertTrue(failure instanceof RotaApiException, failure.toString());
    assertEquals(404, ((RotaApiException) failure).status());
  }

  @Test
  void aHandlerErrorNacksAndEndsTheConsumer(RotaClient rota, RotaServer server) throws Exception {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.of(job));
    AssertionError boom = new AssertionError("boom");
    ConsumerHandle consumer = rota.consume(job, t -> {
      throw boom;
    }, ConsumeOptions.builder().maxWait(Duration.ofSeconds(1)).build());
    assertTrue(consumer.awaitTermination(Duration.ofSeconds(PATIENCE_S)), "did not end");
    assertSame(boom, consumer.failure().orElseThrow());
    assertEquals(1, consumer.failed());
    JsonNode runs = server.runsOf(task.id());
    assertEquals("failed", runs.get(0).get("status").asText());
    assertEquals("AssertionError: boom", runs.get(0).get("message").asText());
  }
}
