/*
 * ZkLoad: the Java load client of `zabref bench cluster` (conformance/bench/javaclient.py builds and drives it).
 *
 * Theory of operation
 * -------------------
 * One JVM for a whole benchmark run (so its JIT warms up once, during the runner's warm-up writes). It reads
 * commands on stdin, one per line, and answers on stdout:
 *
 *   row <write|read> <host> <port> <in_flight> <count> <parent> <reads>
 *       Opens ONE session to host:port (waits for SyncConnected), then issues `count` requests with the
 *       ASYNCHRONOUS API, exactly `in_flight` outstanding (a Semaphore: a new request is issued when one is
 *       answered). write = create(<parent>/<i as %08d>, 100-byte value, OPEN_ACL_UNSAFE, PERSISTENT); read =
 *       getData of the i-th (modulo) znode of <reads> ("parent:count,parent:count", znodes written by earlier
 *       rows; "-" for a write row). Closes the session.
 *       While it runs: "progress <answered>" about once a second. At the end, ONE line:
 *       result {"count":..,"errors":..,"seconds":..,"cpu_seconds":..,"last_error":..,"latencies_ns":[..]}
 *       -- count = requests answered OK, seconds = wall time from the first issue to the last answer,
 *       cpu_seconds = this JVM's CPU time over the same span (all its threads: the client's CPU share),
 *       latencies_ns = issue-to-answer of each OK request (System.nanoTime).
 *       A row that cannot run (no session, timeout) answers "error <why>" instead.
 *   quit (or end of input): exit 0.
 *
 * The value of request i is the same as conformance/bench/workload.py's value(i): "v%09d-" padded with 'x' to 100 bytes.
 * Every callback runs on the client's one event thread, so the latency array needs no lock; the main thread reads
 * it after the CountDownLatch, which orders it after every callback.
 */

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

public final class ZkLoad {
    static final int VALUE_BYTES = 100;
    static final long ROW_TIMEOUT_S = 300;

    static byte[] value(long i) {
        StringBuilder s = new StringBuilder(String.format("v%09d-", i));
        while (s.length() < VALUE_BYTES) {
            s.append('x');
        }
        return s.substring(0, VALUE_BYTES).getBytes(StandardCharsets.US_ASCII);
    }

    /** This JVM's CPU time (all threads) in nanoseconds. */
    static long cpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return ProcessHandle.current().info().totalCpuDuration().map(d -> d.toNanos()).orElse(-1L);
    }

    static String jsonString(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    /** Answers of one row, filled on the event thread. */
    static final class Tally {
        final long[] latencies;
        int ok;
        int errors;
        int answered;
        volatile int answeredShared;
        String lastError;

        Tally(int count) {
            latencies = new long[count];
        }

        void answer(int rc, long start, Semaphore slots, CountDownLatch done) {
            long elapsed = System.nanoTime() - start;
            if (rc == KeeperException.Code.OK.intValue()) {
                latencies[ok++] = elapsed;
            } else {
                errors++;
                lastError = KeeperException.Code.get(rc) + " (" + rc + ")";
            }
            answeredShared = ++answered;
            slots.release();
            done.countDown();
        }
    }

    static ZooKeeper connect(String host, int port) throws IOException, InterruptedException {
        CountDownLatch connected = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(host + ":" + port, 10000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
        });
        if (!connected.await(30, TimeUnit.SECONDS)) {
            zk.close();
            throw new IOException("no session with " + host + ":" + port + " within 30 s");
        }
        return zk;
    }

    static void ensurePath(ZooKeeper zk, String path) throws KeeperException, InterruptedException {
        StringBuilder p = new StringBuilder();
        for (String part : path.substring(1).split("/")) {
            p.append('/').append(part);
            try {
                zk.create(p.toString(), new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
            } catch (KeeperException.NodeExistsException e) {
                // made by an earlier row
            }
        }
    }

    static String[] readPool(String spec) {
        List<String> out = new ArrayList<>();
        for (String part : spec.split(",")) {
            int colon = part.lastIndexOf(':');
            String parent = part.substring(0, colon);
            int n = Integer.parseInt(part.substring(colon + 1));
            for (int i = 0; i < n; i++) {
                out.add(parent + "/" + String.format("%08d", i));
            }
        }
        return out.toArray(new String[0]);
    }

    static String row(String[] a) throws Exception {
        if (a.length != 8) {
            throw new IllegalArgumentException("row takes 7 arguments, got " + (a.length - 1));
        }
        String op = a[1];
        boolean write = op.equals("write");
        if (!write && !op.equals("read")) {
            throw new IllegalArgumentException("unknown op " + op);
        }
        int inFlight = Integer.parseInt(a[4]);
        int count = Integer.parseInt(a[5]);
        String parent = a[6];
        String[] pool = write ? null : readPool(a[7]);
        if (!write && pool.length == 0) {
            throw new IllegalArgumentException("reads need writes first");
        }
        ZooKeeper zk = connect(a[2], Integer.parseInt(a[3]));
        try {
            if (write) {
                ensurePath(zk, parent);
            }
            Semaphore slots = new Semaphore(inFlight);
            CountDownLatch done = new CountDownLatch(count);
            Tally tally = new Tally(count);
            AsyncCallback.StringCallback created = (rc, path, ctx, name) ->
                    tally.answer(rc, (Long) ctx, slots, done);
            AsyncCallback.DataCallback got = (rc, path, ctx, data, stat) ->
                    tally.answer(rc, (Long) ctx, slots, done);
            Thread progress = new Thread(() -> {
                try {
                    while (!done.await(1, TimeUnit.SECONDS)) {
                        synchronized (System.out) {
                            System.out.println("progress " + tally.answeredShared);
                            System.out.flush();
                        }
                    }
                } catch (InterruptedException e) {
                    // the row ended
                }
            });
            progress.setDaemon(true);
            progress.start();
            long cpu0 = cpuNanos();
            long t0 = System.nanoTime();
            for (int i = 0; i < count; i++) {
                slots.acquire();
                Long start = System.nanoTime();
                if (write) {
                    zk.create(parent + "/" + String.format("%08d", i), value(i), ZooDefs.Ids.OPEN_ACL_UNSAFE,
                              CreateMode.PERSISTENT, created, start);
                } else {
                    zk.getData(pool[i % pool.length], false, got, start);
                }
            }
            boolean finished = done.await(ROW_TIMEOUT_S, TimeUnit.SECONDS);
            long wall = System.nanoTime() - t0;
            long cpu = cpuNanos() - cpu0;
            progress.interrupt();
            if (!finished) {
                throw new IOException("row did not finish within " + ROW_TIMEOUT_S + " s (" + tally.answeredShared
                                      + " of " + count + " answered)");
            }
            StringBuilder out = new StringBuilder(32 + 10 * tally.ok);
            out.append("result {\"count\":").append(tally.ok)
               .append(",\"errors\":").append(tally.errors)
               .append(",\"seconds\":").append(wall / 1e9)
               .append(",\"cpu_seconds\":").append(cpu < 0 ? "null" : Double.toString(cpu / 1e9))
               .append(",\"last_error\":").append(jsonString(tally.lastError))
               .append(",\"latencies_ns\":[");
            for (int i = 0; i < tally.ok; i++) {
                if (i > 0) {
                    out.append(',');
                }
                out.append(tally.latencies[i]);
            }
            return out.append("]}").toString();
        } finally {
            zk.close();
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] a = line.trim().split(" ");
            if (a[0].equals("quit")) {
                break;
            }
            String answer;
            try {
                if (!a[0].equals("row")) {
                    throw new IllegalArgumentException("unknown command " + a[0]);
                }
                answer = row(a);
            } catch (Exception e) {
                answer = "error " + (e.toString().replace('\n', ' '));
            }
            synchronized (System.out) {
                System.out.println(answer);
                System.out.flush();
            }
        }
    }
}
