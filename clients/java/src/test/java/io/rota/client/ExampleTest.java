package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** The README's example runs, and a second run finds the order closed already. */
@ExtendWith(RotaServerExtension.class)
class ExampleTest {

  @Test
  void theExampleClosesTheOrderOnce(RotaClient rota) throws Exception {
    ByteArrayOutputStream printed = new ByteArrayOutputStream();
    Task first = Example.run(rota, new PrintStream(printed, true, StandardCharsets.UTF_8));
    String text = printed.toString(StandardCharsets.UTF_8);
    assertEquals(TaskStatus.SUCCEEDED, first.status(), text);
    assertTrue(text.contains("(new)"), text);
    assertTrue(text.contains("closing order {\"order_id\":42} (task " + first.id() + ", attempt 1)"), text);

    printed.reset();
    Task second = Example.run(rota, new PrintStream(printed, true, StandardCharsets.UTF_8));
    text = printed.toString(StandardCharsets.UTF_8);
    assertEquals(first.id(), second.id());
    assertTrue(text.contains("(existing)"), text);
    assertFalse(text.contains("closing order"), text);
  }
}
