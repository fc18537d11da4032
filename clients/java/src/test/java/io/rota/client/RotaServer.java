package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Comparator;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;

/**
 * A real {@code rota standalone} process for the tests, started as the Python client's
 * conftest.py starts it: {@code rota standalone --data-dir <tmp> --listen 127.0.0.1:0} with
 * {@code ROTA_API_TOKEN}, its URL read from the first line it prints. One per test run (see
 * {@link RotaServerExtension}); jobs and workflows are made through the REST API.
 */
final class RotaServer implements AutoCloseable {
  static final String TOKEN = "test-token";
  private static final Pattern URL = Pattern.compile("http://127\\.0\\.0\\.1:\\d+");
  private static final AtomicInteger JOB_NUMBERS = new AtomicInteger();

  final String url;
  private final Process process;
  private final Path dataDir;
  private final Path stderr;
  private final HttpClient http =
      HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

  private RotaServer(String url, Process process, Path dataDir, Path stderr) {
    this.url = url;
    this.process = process;
    this.dataDir = dataDir;
    this.stderr = stderr;
  }

  /**
   * The binary: {@code ROTA_BIN}, else {@code ../../target/debug/rota} from clients/java. A
   * missing one skips the tests, except under {@code CI=true}, where it fails them.
   */
  static Path binary() {
    String configured = System.getenv("ROTA_BIN");
    Path path = (configured != null && !configured.isEmpty()
            ? Paths.get(configured)
            : Paths.get("..", "..", "target", "debug", "rota"))
        .toAbsolutePath()
        .normalize();
    if (!Files.isRegularFile(path) || !Files.isExecutable(path)) {
      String message = "rota binary not found or not executable: " + path
          + " (build it with `cargo build -p rota`, or set ROTA_BIN)";
      if ("true".equalsIgnoreCase(System.getenv("CI"))) {
        fail(message);
      }
      Assumptions.assumeTrue(false, message);
    }
    return path;
  }

  static RotaServer start() throws IOException, InterruptedException {
    Path binary = binary();
    Path dataDir = Files.createTempDirectory("rota-java-client-test");
    Path stderr = dataDir.resolveSibling(dataDir.getFileName() + "-stderr.log");
    ProcessBuilder pb = new ProcessBuilder(binary.toString(), "standalone", "--data-dir",
        dataDir.toString(), "--listen", "127.0.0.1:0");
    pb.environment().put("ROTA_API_TOKEN", TOKEN);
    pb.redirectError(stderr.toFile());
    Process process = pb.start();
    process.getOutputStream().close();
    Runtime.getRuntime().addShutdownHook(new Thread(process::destroyForcibly));

    // The first line names the URL; the rest is drained so that the pipe never fills.
    CompletableFuture<String> firstLine = new CompletableFuture<>();
    Thread reader = new Thread(() -> {
      try (BufferedReader out = new BufferedReader(
          new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = out.readLine()) != null) {
          firstLine.complete(line);
        }
      } catch (IOException e) {
        firstLine.completeExceptionally(e);
      }
      firstLine.complete(null);
    }, "rota-stdout");
    reader.setDaemon(true);
    reader.start();

    RotaServer server = null;
    try {
      String line;
      try {
        line = firstLine.get(30, TimeUnit.SECONDS);
      } catch (Exception e) {
        line = null;
      }
      if (line == null) {
        fail("rota standalone printed no URL (alive: " + process.isAlive() + "):\n" + tail(stderr));
      }
      Matcher m = URL.matcher(line);
      if (!m.find()) {
        fail("no URL in the first stdout line: " + line);
      }
      server = new RotaServer(m.group(), process, dataDir, stderr);
      server.awaitHealthy();
      // The fixture's job, checked once: a pull job with 2 attempts.
      server.createPullJob("orders");
      return server;
    } catch (Throwable t) {
      if (server != null) {
        server.close();
      } else {
        process.destroyForcibly();
        deleteTree(dataDir);
      }
      throw t;
    }
  }

  private void awaitHealthy() throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      try {
        HttpResponse<String> r = http.send(
            HttpRequest.newBuilder(URI.create(url + "/healthz")).timeout(Duration.ofSeconds(2)).build(),
            HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() == 200) {
          return;
        }
      } catch (IOException e) {
        // not listening yet
      }
      if (System.nanoTime() > deadline || !process.isAlive()) {
        fail("rota standalone at " + url + " never became healthy:\n" + tail(stderr));
      }
      Thread.sleep(50);
    }
  }

  /** A client of this server with the test token. */
  RotaClient client() {
    return RotaClient.builder(url).token(TOKEN).requestTimeout(Duration.ofSeconds(10)).build();
  }

  /** A fresh pull job ({@code orders-N}, like {@code orders}), so tests never share tasks. */
  String newPullJob() {
    return createPullJob("orders-" + JOB_NUMBERS.incrementAndGet());
  }

  String createPullJob(String name) {
    ObjectNode body = Json.object().put("name", name).put("app", "shop").put("max_attempts", 2);
    body.putObject("schedule").put("kind", "none");
    body.putObject("delivery").put("kind", "pull");
    Reply r = send("POST", "/api/v1/jobs", body);
    assertEquals(201, r.status, r.body);
    return name;
  }

  /** A raw call of the REST API with the test token, outside the client under test. */
  Reply send(String method, String path, JsonNode body) {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url + path))
        .timeout(Duration.ofSeconds(10))
        .header("Authorization", "Bearer " + TOKEN);
    if (body != null) {
      b.header("Content-Type", "application/json")
          .method(method, HttpRequest.BodyPublishers.ofString(body.toString()));
    } else {
      b.method(method, HttpRequest.BodyPublishers.noBody());
    }
    try {
      HttpResponse<String> r = http.send(b.build(), HttpResponse.BodyHandlers.ofString());
      return new Reply(r.statusCode(), r.body());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** The runs of task {@code task}, oldest attempt first. */
  JsonNode runsOf(long task) {
    Reply r = send("GET", "/api/v1/runs?task=" + task, null);
    assertEquals(200, r.status, r.body);
    return r.json().get("items");
  }

  /** The end of the server's log, for failure messages. */
  String stderrTail() {
    return tail(stderr);
  }

  @Override
  public void close() {
    process.destroy();
    try {
      if (!process.waitFor(15, TimeUnit.SECONDS)) {
        process.destroyForcibly().waitFor(15, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
    deleteTree(dataDir);
    try {
      Files.deleteIfExists(stderr);
    } catch (IOException e) {
      // left in the temp folder
    }
  }

  private static String tail(Path file) {
    try {
      String text = new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
      return text.length() <= 4000 ? text : text.substring(text.length() - 4000);
    } catch (IOException e) {
      return "(no log: " + e + ")";
    }
  }

  private static void deleteTree(Path root) {
    try (Stream<Path> paths = Files.walk(root)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      // left in the temp folder
    }
  }

  /** An answer of {@link #send}. */
  static final class Reply {
    final int status;
    final String body;

    Reply(int status, String body) {
      this.status = status;
      this.body = body;
    }

    JsonNode json() {
      try {
        return Json.MAPPER.readTree(body);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }
}
