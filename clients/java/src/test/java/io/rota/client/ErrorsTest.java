package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.ServerSocket;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** What the server refuses arrives as a {@link RotaApiException} with its status and text. */
@ExtendWith(RotaServerExtension.class)
class ErrorsTest {

  @Test
  void invalidValuesAre422sNamingTheField(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();

    RotaApiException negative = assertThrows(RotaApiException.class,
        () -> rota.createTask(NewTask.builder(job).delayMs(-1).build()));
    assertEquals(422, negative.status());
    assertTrue(negative.isClientError());
    assertEquals(Optional.of("delay_ms"), negative.field());
    assertTrue(negative.error().contains("negative"), negative.error());
    assertEquals("{\"error\":\"" + negative.error() + "\"}", negative.body());
    assertEquals(negative.error(), negative.errorBody().get().get("error").asText());
    assertEquals("POST", negative.method());
    assertEquals("/api/v1/tasks", negative.path());
    assertTrue(negative.getMessage().contains("422") && negative.getMessage().contains("delay_ms"),
        negative.getMessage());

    RotaApiException both = assertThrows(RotaApiException.class, () -> rota.createTask(
        NewTask.builder(job).delayMs(5).runAt(Instant.now()).build()));
    assertEquals(422, both.status());
    assertEquals(Optional.of("delay_ms"), both.field());

    RotaApiException priority = assertThrows(RotaApiException.class,
        () -> rota.createTask(NewTask.builder(job).priority(5000).build()));
    assertEquals(Optional.of("priority"), priority.field());

    RotaApiException batchItem = assertThrows(RotaApiException.class, () -> rota.createTasks(
        List.of(NewTask.of(job), NewTask.builder(job).maxAttempts(0).build())));
    assertEquals(422, batchItem.status());
    assertEquals(Optional.of("tasks[1].max_attempts"), batchItem.field());

    RotaApiException max = assertThrows(RotaApiException.class,
        () -> rota.pull(job, PullOptions.builder().max(0).build()));
    assertEquals(422, max.status());
    assertEquals(Optional.of("max"), max.field());

    RotaApiException lease = assertThrows(RotaApiException.class,
        () -> rota.pull(job, PullOptions.builder().lease(Duration.ofMillis(10)).build()));
    assertEquals(Optional.of("lease_ms"), lease.field());

    // A malformed query parameter is a 400 naming it.
    RotaApiException limit = assertThrows(RotaApiException.class,
        () -> rota.listTasks(TaskQuery.builder().limit(0).build()));
    assertEquals(400, limit.status());
    assertEquals(Optional.of("limit"), limit.field());

    // An unknown field of a raw request: 400, named.
    RotaApiException unknown = assertThrows(RotaApiException.class, () -> rota.request("POST",
        "/api/v1/tasks", Json.object().put("job", job).put("bogus", 1)));
    assertEquals(400, unknown.status());
    assertEquals(Optional.of("bogus"), unknown.field());
  }

  @Test
  void missingThingsAre404s(RotaClient rota) {
    RotaApiException task = assertThrows(RotaApiException.class, () -> rota.getTask(999_999_999L));
    assertEquals(404, task.status());
    assertTrue(task.isNotFound());
    assertTrue(task.error().contains("999999999"), task.error());
    assertEquals(Optional.empty(), task.field());

    RotaApiException cancel = assertThrows(RotaApiException.class, () -> rota.cancelTask(999_999_999L));
    assertEquals(404, cancel.status());

    RotaApiException job = assertThrows(RotaApiException.class,
        () -> rota.pull("no-such-job", PullOptions.defaults()));
    assertEquals(404, job.status());
    assertTrue(job.error().contains("no-such-job"), job.error());

    RotaApiException create = assertThrows(RotaApiException.class,
        () -> rota.createTask(NewTask.of("no such job/é")));
    assertEquals(404, create.status());
    assertEquals(Optional.of("job"), create.field());

    RotaApiException ack = assertThrows(RotaApiException.class, () -> rota.ack(999_999_999L, "lease"));
    assertEquals(404, ack.status());
    assertFalse(ack.isLeaseLost());

    RotaApiException route = assertThrows(RotaApiException.class,
        () -> rota.request("GET", "/api/v1/no-such-route", null));
    assertEquals(404, route.status());
  }

  @Test
  void conflictsAre409s(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.of(job));
    PulledTask item = Pulls.pullOne(rota, job);
    RotaApiException running = assertThrows(RotaApiException.class, () -> rota.cancelTask(task.id()));
    assertEquals(409, running.status());
    assertTrue(running.isConflict());
    assertFalse(running.isLeaseLost());
    assertTrue(running.error().contains("running"), running.error());
    rota.ack(item.task(), item.lease());

    // A job delivered by http has nothing to pull.
    ObjectNode http =
        Json.object().put("name", "hook-" + job).put("app", "shop");
    http.putObject("schedule").put("kind", "none");
    http.putObject("delivery").put("kind", "http").put("url", "https://example.com/hook");
    http.putArray("http_allow").add("https://example.com");
    rota.request("POST", "/api/v1/jobs", http);
    RotaApiException notPull = assertThrows(RotaApiException.class,
        () -> rota.pull("hook-" + job, PullOptions.defaults()));
    assertEquals(409, notPull.status());
    assertTrue(notPull.error().contains("http"), notPull.error());

    // A name taken: 409 through the raw request too.
    RotaApiException taken = assertThrows(RotaApiException.class, () -> rota.request("POST",
        "/api/v1/jobs", http));
    assertEquals(409, taken.status());
  }

  @Test
  void aWrongTokenIs401(RotaServer server) {
    RotaClient intruder = RotaClient.builder(server.url).token("wrong-token").build();
    RotaApiException denied = assertThrows(RotaApiException.class, () -> intruder.getTask(1));
    assertEquals(401, denied.status());
    assertFalse(denied.error().isEmpty());

    RotaClient anonymous = RotaClient.builder(server.url + "/").build();
    assertEquals(401, assertThrows(RotaApiException.class, () -> anonymous.getTask(1)).status());
  }

  @Test
  void noAnswerIsAConnectionException() throws IOException {
    int port;
    try (ServerSocket socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    RotaClient nowhere = RotaClient.builder("http://127.0.0.1:" + port).token("t")
        .connectTimeout(Duration.ofSeconds(2)).build();
    RotaConnectionException e = assertThrows(RotaConnectionException.class, () -> nowhere.getTask(1));
    assertTrue(e.getMessage().contains("GET /api/v1/tasks/1"), e.getMessage());
    assertTrue(e instanceof RotaException);
  }

  @Test
  void aBaseUrlMustBeHttp() {
    assertThrows(IllegalArgumentException.class, () -> RotaClient.builder("ftp://example.com"));
    assertThrows(IllegalArgumentException.class, () -> RotaClient.builder("localhost:8080"));
    assertEquals("https://ops.example.com/rota",
        RotaClient.builder("https://ops.example.com/rota/").build().baseUrl());
  }
}
