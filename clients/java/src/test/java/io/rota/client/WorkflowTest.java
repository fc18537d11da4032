package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** Workflows: start an instance, feed its steps through pull jobs, await its output. */
@ExtendWith(RotaServerExtension.class)
class WorkflowTest {

  private static JsonNode json(String text) throws Exception {
    return Json.MAPPER.readTree(text);
  }

  /** {@code POST /api/v1/workflows} of steps given as {name, job, after...}. */
  private static void createWorkflow(RotaClient rota, String name, String[]... steps) {
    ObjectNode body = Json.object().put("name", name).put("app", "shop");
    ArrayNode list = body.putArray("steps");
    for (String[] step : steps) {
      ObjectNode s = list.addObject().put("name", step[0]).put("job", step[1]);
      if (step.length > 2) {
        ArrayNode after = s.putArray("after");
        for (int i = 2; i < step.length; i++) {
          after.add(step[i]);
        }
      }
    }
    assertEquals(name, rota.request("POST", "/api/v1/workflows", body).get("name").asText());
  }

  @Test
  void startAndAwaitItsOutput(RotaClient rota, RotaServer server) throws Exception {
    String job = server.newPullJob();
    String name = "wf-" + job;
    createWorkflow(rota, name, new String[] {"close", job});

    WorkflowInstance started = rota.startWorkflow(name, Map.of("order", 42), "order-42");
    assertTrue(started.created());
    assertTrue(started.isRunning());
    assertEquals(json("{\"order\":42}"), started.input());
    WorkflowInstance again = rota.startWorkflow(name, Map.of("order", 43), "order-42");
    assertFalse(again.created());
    assertEquals(started.id(), again.id());
    assertEquals(json("{\"order\":42}"), again.input());

    CompletableFuture<WorkflowInstance> waiter = CompletableFuture.supplyAsync(() -> {
      try {
        return rota.waitForInstance(started.id(), Duration.ofSeconds(30), Duration.ofMillis(100));
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    });
    PulledTask item = Pulls.pullOne(rota, job);
    JsonNode payload = json(item.payload().orElseThrow());
    assertEquals(json("{\"order\":42}"), payload.get("input"));
    rota.ack(item.task(), item.lease(), Map.of("closed", 42));

    WorkflowInstance done = waiter.get(35, TimeUnit.SECONDS);
    assertEquals(InstanceStatus.SUCCEEDED, done.status());
    assertEquals(json("{\"close\":{\"closed\":42}}"), done.output());
    InstanceStep step = done.step("close").orElseThrow();
    assertEquals(StepStatus.SUCCEEDED, step.status());
    assertEquals(json("{\"closed\":42}"), step.output());
    assertEquals(item.task(), step.task().getAsLong());
    assertEquals(1, step.runs().size());
    assertTrue(done.finishedAt().isPresent());
    assertEquals(done.id(), rota.getInstance(done.id()).id());

    RotaApiException missing = assertThrows(RotaApiException.class,
        () -> rota.startWorkflow("no-such-workflow", null));
    assertEquals(404, missing.status());
    assertEquals(404, assertThrows(RotaApiException.class, () -> rota.getInstance(999_999_999L)).status());

    WorkflowInstance idle = rota.startWorkflow(name, null);
    assertTrue(idle.input().isNull());
    assertThrows(TimeoutException.class,
        () -> rota.waitForInstance(idle.id(), Duration.ofMillis(300), Duration.ofMillis(100)));
    rota.request("POST", "/api/v1/workflow-instances/" + idle.id() + "/cancel", null);
    assertEquals(InstanceStatus.CANCELLED,
        rota.waitForInstance(idle.id(), Duration.ofSeconds(30)).status());
  }

  @Test
  void consumersPassStepOutputsAlong(RotaClient rota, RotaServer server) throws Exception {
    String pricing = server.newPullJob();
    String billing = server.newPullJob();
    String name = "wf-" + pricing + "-" + billing;
    createWorkflow(rota, name, new String[] {"price", pricing}, new String[] {"bill", billing, "price"});

    ConsumeOptions options = ConsumeOptions.builder().maxWait(Duration.ofSeconds(1)).build();
    try (ConsumerHandle price = rota.consumeWithOutput(pricing, task -> {
          JsonNode input = json(task.payload().orElseThrow()).get("input");
          return Map.of("total", input.get("qty").asInt() * 7);
        }, options);
        ConsumerHandle bill = rota.consumeWithOutput(billing, task -> {
          JsonNode steps = json(task.payload().orElseThrow()).get("steps");
          return Map.of("billed", steps.get("price").get("total").asInt());
        }, options)) {
      WorkflowInstance started = rota.startWorkflow(name, Map.of("qty", 6));
      WorkflowInstance done = rota.waitForInstance(started.id(), Duration.ofSeconds(30));
      assertEquals(InstanceStatus.SUCCEEDED, done.status(), done.toString());
      assertEquals(json("{\"bill\":{\"billed\":42}}"), done.output());
      assertEquals(json("{\"total\":42}"), done.step("price").orElseThrow().output());
      assertEquals(1, price.succeeded());
      assertEquals(1, bill.succeeded());
    }
  }
}
