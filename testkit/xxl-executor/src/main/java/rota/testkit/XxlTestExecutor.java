package rota.testkit;

import com.xxl.job.core.context.XxlJobHelper;
import com.xxl.job.core.executor.impl.XxlJobSimpleExecutor;
import com.xxl.job.core.handler.annotation.XxlJob;
import com.xxl.job.core.log.XxlJobFileAppender;

import java.io.IOException;
import java.lang.reflect.Field;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A small, real XXL-JOB executor for Rota's integration tests.
 *
 * <p>It runs {@link XxlJobSimpleExecutor} from the real {@code com.xuxueli:xxl-job-core} (2.5.0 or 3.3.2;
 * this one source compiles against both) with a fixed set of {@code @XxlJob} handlers, prints
 * {@code READY <address>} on stdout once the embedded server accepts connections, and on SIGTERM calls
 * {@code destroy()} (which sends {@code registryRemove}) and exits with status 0.
 * Everything else (framework and handler logs) goes to stderr through slf4j-simple.
 *
 * <p>See README.md next to pom.xml for the flags and handlers.
 */
public final class XxlTestExecutor {

    private XxlTestExecutor() {
    }

    /** Flag name (without "--") to environment variable, in help order. */
    private static final Map<String, String> FLAGS = new LinkedHashMap<>();

    static {
        FLAGS.put("admin-addresses", "XXL_ADMIN_ADDRESSES");
        FLAGS.put("access-token", "XXL_ACCESS_TOKEN");
        FLAGS.put("appname", "XXL_APPNAME");
        FLAGS.put("ip", "XXL_IP");
        FLAGS.put("port", "XXL_PORT");
        FLAGS.put("address", "XXL_ADDRESS");
        FLAGS.put("log-path", "XXL_LOG_PATH");
        FLAGS.put("log-retention-days", "XXL_LOG_RETENTION_DAYS");
        FLAGS.put("admin-timeout", "XXL_ADMIN_TIMEOUT");
        FLAGS.put("ready-timeout", "XXL_READY_TIMEOUT");
        FLAGS.put("log-level", "XXL_LOG_LEVEL");
    }

    private static final String USAGE = String.join("\n",
            "usage: run [--flag value | --flag=value]...   (each flag also reads the env variable shown)",
            "  --admin-addresses URLS   XXL_ADMIN_ADDRESSES   comma list, e.g. http://127.0.0.1:8080/xxl-job-admin (required)",
            "  --access-token TOKEN     XXL_ACCESS_TOKEN      sent/checked as XXL-JOB-ACCESS-TOKEN; unset = none",
            "  --appname NAME           XXL_APPNAME           registryKey (default rota-test-executor)",
            "  --ip IP                  XXL_IP                (default 127.0.0.1)",
            "  --port PORT              XXL_PORT              embedded server port; 0 = a free port (default 0)",
            "  --address URL            XXL_ADDRESS           registryValue (default http://IP:PORT/)",
            "  --log-path DIR           XXL_LOG_PATH          job log root (default: a new temp dir)",
            "  --log-retention-days N   XXL_LOG_RETENTION_DAYS (default -1 = never clean; <3 disables)",
            "  --admin-timeout SECONDS  XXL_ADMIN_TIMEOUT     executor->admin HTTP timeout, 1..10 (default 3)",
            "  --ready-timeout SECONDS  XXL_READY_TIMEOUT     give up waiting for the port (default 60)",
            "  --log-level LEVEL        XXL_LOG_LEVEL         slf4j-simple level: trace|debug|info|warn|error (default info)",
            "handlers: hello, fail, slow, shard, echo_log");

    public static void main(String[] args) throws Exception {
        Map<String, String> opts;
        try {
            opts = parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("xxl-test-executor: " + e.getMessage());
            System.err.println(USAGE);
            System.exit(2);
            return;
        }
        if (opts.containsKey("help")) {
            System.out.println(USAGE);
            return;
        }

        // slf4j-simple reads these once, at the first LoggerFactory use: set them before touching xxl-job classes.
        setIfAbsent("org.slf4j.simpleLogger.logFile", "System.err");
        setIfAbsent("org.slf4j.simpleLogger.defaultLogLevel", opts.getOrDefault("log-level", "info"));
        setIfAbsent("org.slf4j.simpleLogger.showDateTime", "true");
        setIfAbsent("org.slf4j.simpleLogger.dateTimeFormat", "HH:mm:ss.SSS");
        setIfAbsent("org.slf4j.simpleLogger.log.io.netty", "warn");

        String adminAddresses = opts.get("admin-addresses");
        if (adminAddresses == null || adminAddresses.trim().isEmpty()) {
            die(2, "--admin-addresses (or XXL_ADMIN_ADDRESSES) is required");
        }
        String accessToken = opts.get("access-token"); // null = not configured; "" is passed through as is
        String appname = opts.getOrDefault("appname", "rota-test-executor");
        String ip = opts.getOrDefault("ip", "127.0.0.1");
        int port = intOpt(opts, "port", 0);
        int logRetentionDays = intOpt(opts, "log-retention-days", -1);
        int adminTimeout = intOpt(opts, "admin-timeout", 3);
        int readyTimeout = intOpt(opts, "ready-timeout", 60);

        if (port == 0) {
            port = freePort();
        } else if (!portFree(port)) {
            die(3, "port " + port + " is already in use");
        }
        String address = opts.get("address");
        if (address == null || address.trim().isEmpty()) {
            address = "http://" + ip + ":" + port + "/";
        }
        String logPath = opts.get("log-path");
        if (logPath == null || logPath.trim().isEmpty()) {
            logPath = Files.createTempDirectory("xxl-test-executor-").toString();
        }
        Path logDir = Paths.get(logPath).toAbsolutePath();
        Files.createDirectories(logDir);

        XxlJobSimpleExecutor executor = new XxlJobSimpleExecutor();
        executor.setAdminAddresses(adminAddresses.trim());
        executor.setAccessToken(accessToken);
        executor.setTimeout(adminTimeout);
        executor.setAppname(appname);
        executor.setIp(ip);
        executor.setPort(port);
        executor.setAddress(address);
        executor.setLogPath(logDir.toString());
        executor.setLogRetentionDays(logRetentionDays);
        executor.setXxlJobBeanList(Collections.singletonList(new Handlers()));

        pinCallbackRetryDir(logDir);

        System.err.println("xxl-test-executor: starting appname=" + appname + " address=" + address
                + " admin=" + adminAddresses + " logPath=" + logDir
                + " token=" + (accessToken == null ? "(none)" : "(set, " + accessToken.length() + " chars)"));
        try {
            executor.start();
        } catch (Throwable e) {
            e.printStackTrace();
            die(1, "executor start failed: " + e);
        }

        // The embedded Netty server binds on a background thread; wait until it accepts connections.
        // It binds every interface, so loopback reaches it whatever --ip says.
        if (!waitForPort(port, readyTimeout)) {
            try {
                executor.destroy();
            } catch (Throwable ignored) {
                // best effort
            }
            die(1, "embedded server did not listen on port " + port + " within " + readyTimeout + "s");
        }

        CountDownLatch forever = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.err.println("xxl-test-executor: shutting down (destroy + registryRemove)");
            try {
                executor.destroy();
            } catch (Throwable e) {
                e.printStackTrace();
            }
            System.err.println("xxl-test-executor: stopped");
            System.out.flush();
            System.err.flush();
            // A signal-initiated exit would otherwise report 128+15; this process stopped cleanly.
            Runtime.getRuntime().halt(0);
        }, "xxl-test-executor-shutdown"));

        System.out.println("READY " + address);
        System.out.flush();

        forever.await();
    }

    /** The job handlers, registered by XxlJobSimpleExecutor from their {@code @XxlJob} annotations. */
    public static final class Handlers {

        private static String param() {
            String p = XxlJobHelper.getJobParam();
            return p == null ? "" : p;
        }

        @XxlJob("hello")
        public void hello() throws Exception {
            String p = param();
            XxlJobHelper.log("hello {}", p);
            XxlJobHelper.handleSuccess("hello " + p);
        }

        @XxlJob("fail")
        public void fail() throws Exception {
            String p = param();
            XxlJobHelper.log("failing on purpose: {}", p);
            XxlJobHelper.handleFail("failed on purpose: " + p);
        }

        /** Sleeps (up to 10 minutes) until interrupted by /kill, a timeout or shutdown; rethrows the interrupt. */
        @XxlJob("slow")
        public void slow() throws Exception {
            String p = param();
            XxlJobHelper.log("slow started {}", p);
            long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(10);
            try {
                while (System.nanoTime() < deadline) {
                    Thread.sleep(100);
                }
            } catch (InterruptedException e) {
                XxlJobHelper.log("slow interrupted {}", p);
                throw e;
            }
            XxlJobHelper.handleSuccess("slow finished " + p);
        }

        @XxlJob("shard")
        public void shard() throws Exception {
            String p = param();
            String msg = "shard " + XxlJobHelper.getShardIndex() + "/" + XxlJobHelper.getShardTotal() + " " + p;
            XxlJobHelper.log("{}", msg);
            XxlJobHelper.handleSuccess(msg);
        }

        @XxlJob("echo_log")
        public void echoLog() throws Exception {
            XxlJobHelper.log("line 1");
            XxlJobHelper.log("line 2");
            XxlJobHelper.log("line 3");
            // No handleSuccess: the default result (200, handleMsg null) is what most real handlers report.
        }
    }

    // ---------------------------------------------------------------- plumbing

    /**
     * xxl-job-core 3.3.2 keeps failed callbacks (retried every 30 s) in a directory fixed at class load,
     * {@code /data/applogs/xxl-job/jobhandler/callbacklogs}, whatever logPath says (initLogPath never
     * updates it). Every 3.3.2 executor on the machine would then share, and re-send, each other's files.
     * Point it at {@code <logPath>/callbacklogs} before start() loads TriggerCallbackThread (which reads it
     * once). 2.5.0 has no such field: it already uses {@code <logPath>/callbacklog}.
     */
    private static void pinCallbackRetryDir(Path logDir) {
        try {
            Field f = XxlJobFileAppender.class.getDeclaredField("callbackLogPath");
            f.setAccessible(true);
            f.set(null, logDir.resolve("callbacklogs").toString());
        } catch (NoSuchFieldException e) {
            // 2.x: nothing to do
        } catch (ReflectiveOperationException | RuntimeException e) {
            System.err.println("xxl-test-executor: could not move the callback retry dir: " + e);
        }
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> opts = new LinkedHashMap<>();
        for (Map.Entry<String, String> f : FLAGS.entrySet()) {
            String v = System.getenv(f.getValue());
            if (v != null) {
                opts.put(f.getKey(), v);
            }
        }
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("-h") || a.equals("--help")) {
                opts.put("help", "");
                continue;
            }
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument: " + a);
            }
            String name = a.substring(2);
            String value;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            } else {
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException("missing value for --" + name);
                }
                value = args[++i];
            }
            if (!FLAGS.containsKey(name)) {
                throw new IllegalArgumentException("unknown flag: --" + name);
            }
            opts.put(name, value);
        }
        return opts;
    }

    private static int intOpt(Map<String, String> opts, String name, int dflt) {
        String v = opts.get(name);
        if (v == null || v.trim().isEmpty()) {
            return dflt;
        }
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            die(2, "--" + name + " must be an integer, got: " + v);
            return dflt;
        }
    }

    private static void setIfAbsent(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(false);
            s.bind(new InetSocketAddress(0));
            return s.getLocalPort();
        }
    }

    private static boolean portFree(int port) {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(true);
            s.bind(new InetSocketAddress(port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static boolean waitForPort(int port, int timeoutSeconds) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Math.max(1, timeoutSeconds));
        while (System.nanoTime() < deadline) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 200);
                return true;
            } catch (IOException e) {
                Thread.sleep(25);
            }
        }
        return false;
    }

    private static void die(int code, String msg) {
        System.err.println("xxl-test-executor: " + msg);
        System.err.flush();
        System.exit(code);
    }
}
