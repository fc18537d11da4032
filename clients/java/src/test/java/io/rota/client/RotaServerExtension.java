package io.rota.client;

import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * Starts one {@link RotaServer} for the whole test run (kept in the root context's store,
 * closed when the run ends) and injects it, or a {@link RotaClient} of it, into tests:
 * {@code @ExtendWith(RotaServerExtension.class)}.
 */
final class RotaServerExtension implements BeforeEachCallback, ParameterResolver {
  /**
   * The client logs through {@code System.Logger} (java.util.logging by default): quiet in the
   * tests, which provoke refused pulls on purpose, unless {@code ROTA_TEST_LOG} is set.
   */
  private static final java.util.logging.Logger CLIENT_LOG =
      java.util.logging.Logger.getLogger("io.rota.client");

  static {
    if (System.getenv("ROTA_TEST_LOG") == null) {
      CLIENT_LOG.setLevel(java.util.logging.Level.OFF);
    }
  }

  private static final ExtensionContext.Namespace NAMESPACE =
      ExtensionContext.Namespace.create(RotaServerExtension.class);

  /** The store's handle on the server: closed by JUnit at the end of the run. */
  private static final class Resource implements ExtensionContext.Store.CloseableResource {
    final RotaServer server;

    Resource(RotaServer server) {
      this.server = server;
    }

    @Override
    public void close() {
      server.close();
    }
  }

  /** Per test, so that without a binary each test is reported skipped, with the reason. */
  @Override
  public void beforeEach(ExtensionContext context) {
    server(context);
  }

  private static RotaServer server(ExtensionContext context) {
    RotaServer.binary(); // skips (or fails under CI=true) without a binary, every time
    return context.getRoot().getStore(NAMESPACE).getOrComputeIfAbsent("server", key -> {
      try {
        return new Resource(RotaServer.start());
      } catch (Exception e) {
        throw new IllegalStateException("could not start rota standalone: " + e, e);
      }
    }, Resource.class).server;
  }

  @Override
  public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
    Class<?> type = parameter.getParameter().getType();
    return type == RotaServer.class || type == RotaClient.class;
  }

  @Override
  public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
    RotaServer server = server(context);
    return parameter.getParameter().getType() == RotaServer.class ? server : server.client();
  }
}
