// Scenarios with the RabbitMQ Java client (Debian's librabbitmq-client-java): connection and
// channel lifecycle, every exchange type, queue options, acks and requeue ordering, prefetch,
// confirms, returns, transactions, recover, error replies by code, large and empty messages.
// Prints one JSON line per scenario for conformance/run.
import com.rabbitmq.client.*;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;

public class Suite {
    interface Body { void run() throws Exception; }

    static String broker;
    static String http;
    static final List<Object[]> scenarios = new ArrayList<>();

    static void scenario(String name, String[] covers, Body body) {
        scenarios.add(new Object[] {name, covers, body});
    }

    static void check(boolean cond, String what) {
        if (!cond) throw new AssertionError(what);
    }

    static void eq(Object got, Object want, String what) {
        if (!Objects.equals(got, want)) throw new AssertionError(what + ": expected " + want + ", got " + got);
    }

    static String name(String p) {
        return "conf-java-" + p + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static Connection open() throws Exception {
        ConnectionFactory f = new ConnectionFactory();
        f.setUri(broker);
        f.setAutomaticRecoveryEnabled(false);
        return f.newConnection();
    }

    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static String get(Channel ch, String q) throws IOException {
        GetResponse r = ch.basicGet(q, true);
        return r == null ? null : new String(r.getBody(), StandardCharsets.UTF_8);
    }

    /** Runs body expecting a channel error; returns its reply code. */
    static int channelError(Body body) throws Exception {
        try {
            body.run();
        } catch (IOException | AlreadyClosedException e) {
            Throwable c = e instanceof IOException ? e.getCause() : e;
            if (c instanceof ShutdownSignalException) {
                Method m = ((ShutdownSignalException) c).getReason();
                if (m instanceof AMQP.Channel.Close) return ((AMQP.Channel.Close) m).getReplyCode();
                if (m instanceof AMQP.Connection.Close) return ((AMQP.Connection.Close) m).getReplyCode();
            }
            throw e;
        }
        throw new AssertionError("the channel was not closed");
    }

    /** A management API request with the broker URI's credentials; returns the body. */
    static String api(String method, String path) throws Exception {
        java.net.URI u = new java.net.URI(broker);
        String info = u.getUserInfo() == null ? "guest:guest" : java.net.URLDecoder.decode(u.getUserInfo(), "UTF-8");
        java.net.HttpURLConnection c = (java.net.HttpURLConnection) new java.net.URL(http + path).openConnection();
        c.setRequestMethod(method);
        c.setRequestProperty("Authorization", "Basic " + Base64.getEncoder().encodeToString(info.getBytes(StandardCharsets.UTF_8)));
        int code = c.getResponseCode();
        if (code >= 400) return "";
        try (java.io.InputStream in = c.getInputStream()) {
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            byte[] buf = new byte[8192];
            for (int n; (n = in.read(buf)) > 0; ) out.write(buf, 0, n);
            return new String(out.toByteArray(), StandardCharsets.UTF_8);
        }
    }

    /** The `name` of the connection object whose client properties carry `connection_name`. */
    static String connectionNamed(String list, String tag) {
        int depth = 0, start = -1;
        boolean inStr = false;
        for (int i = 0; i < list.length(); i++) {
            char c = list.charAt(i);
            if (inStr) {
                if (c == '\\') i++;
                else if (c == '"') inStr = false;
                continue;
            }
            if (c == '"') inStr = true;
            else if (c == '{' && depth++ == 0) start = i;
            else if (c == '}' && --depth == 0) {
                String obj = list.substring(start, i + 1);
                if (obj.contains("\"connection_name\":\"" + tag + "\"")) return topLevelName(obj);
            }
        }
        return null;
    }

    static String topLevelName(String obj) {
        int depth = 0;
        boolean inStr = false;
        for (int i = 0; i < obj.length(); i++) {
            char c = obj.charAt(i);
            if (inStr) {
                if (c == '\\') i++;
                else if (c == '"') inStr = false;
                continue;
            }
            if (c == '{') depth++;
            else if (c == '}') depth--;
            else if (c == '"') {
                if (depth == 1 && obj.startsWith("\"name\":\"", i)) {
                    int from = i + 8;
                    return obj.substring(from, obj.indexOf('"', from));
                }
                inStr = true;
            }
        }
        return null;
    }

    static String json(String s) {
        if (s == null) return "null";
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (args[i].equals("--broker")) broker = args[i + 1];
            if (args[i].equals("--http")) http = args[i + 1];
        }

        scenario("connection_lifecycle", new String[] {"connection.start", "connection.start-ok", "connection.tune",
                "connection.tune-ok", "connection.open", "connection.open-ok", "connection.close", "connection.close-ok",
                "ext:capabilities"}, () -> {
            Connection conn = open();
            @SuppressWarnings("unchecked")
            Map<String, Object> caps = (Map<String, Object>) conn.getServerProperties().get("capabilities");
            for (String c : new String[] {"publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                    "consumer_cancel_notify", "connection.blocked", "authentication_failure_close"}) {
                eq(caps.get(c), Boolean.TRUE, "capability " + c);
            }
            check(conn.getServerProperties().get("version") != null, "a version");
            conn.close();
            check(!conn.isOpen(), "closed");
        });

        scenario("channel_lifecycle", new String[] {"channel.open", "channel.open-ok", "channel.close", "channel.close-ok"}, () -> {
            Connection conn = open();
            List<Channel> chans = new ArrayList<>();
            for (int i = 0; i < 10; i++) chans.add(conn.createChannel());
            for (Channel c : chans) c.close();
            Channel ch = conn.createChannel(7);
            eq(ch.getChannelNumber(), 7, "chosen channel number");
            ch.queueDeclare("", false, true, true, null);
            conn.close();
        });

        scenario("every_exchange_type_routes", new String[] {"exchange.declare", "exchange.declare-ok", "queue.declare",
                "queue.declare-ok", "queue.bind", "queue.bind-ok", "basic.publish", "basic.get", "basic.get-ok", "basic.get-empty"}, () -> {
            Connection conn = open();
            Channel ch = conn.createChannel();
            String a = ch.queueDeclare().getQueue(), q2 = ch.queueDeclare().getQueue();
            String d = name("direct"), t = name("topic"), f = name("fanout"), h = name("headers");
            ch.exchangeDeclare(d, "direct", false, true, null);
            ch.exchangeDeclare(t, "topic", false, true, null);
            ch.exchangeDeclare(f, "fanout", false, true, null);
            ch.exchangeDeclare(h, "headers", false, true, null);
            ch.queueBind(a, d, "red");
            ch.queueBind(a, t, "*.eu");
            ch.queueBind(q2, t, "#");
            ch.queueBind(a, f, "");
            Map<String, Object> match = new HashMap<>();
            match.put("x-match", "any");
            match.put("kind", "invoice");
            ch.queueBind(q2, h, "", match);
            ch.basicPublish(d, "red", null, b("d"));
            ch.basicPublish(d, "blue", null, b("lost"));
            ch.basicPublish(t, "order.eu", null, b("t"));
            ch.basicPublish(f, "", null, b("f"));
            Map<String, Object> headers = new HashMap<>();
            headers.put("kind", "invoice");
            ch.basicPublish(h, "", new AMQP.BasicProperties.Builder().headers(headers).build(), b("h"));
            ch.queueDeclarePassive(a);
            List<String> gotA = new ArrayList<>(), gotB = new ArrayList<>();
            for (String m; (m = get(ch, a)) != null; ) gotA.add(m);
            for (String m; (m = get(ch, q2)) != null; ) gotB.add(m);
            eq(gotA, Arrays.asList("d", "t", "f"), "queue a");
            eq(gotB, Arrays.asList("t", "h"), "queue b");
            conn.close();
        });

        scenario("requeued_messages_keep_their_place", new String[] {"basic.ack", "basic.nack", "basic.reject"}, () -> {
            Connection conn = open();
            Channel ch = conn.createChannel();
            String q = ch.queueDeclare().getQueue();
            for (int i = 1; i <= 4; i++) ch.basicPublish("", q, null, b(String.valueOf(i)));
            GetResponse m1 = ch.basicGet(q, false), m2 = ch.basicGet(q, false);
            ch.basicNack(m2.getEnvelope().getDeliveryTag(), false, true);
            ch.basicReject(m1.getEnvelope().getDeliveryTag(), true);
            List<String> got = new ArrayList<>();
            for (GetResponse r; (r = ch.basicGet(q, false)) != null; ) {
                got.add(new String(r.getBody(), StandardCharsets.UTF_8) + ":" + r.getEnvelope().isRedeliver());
                ch.basicAck(r.getEnvelope().getDeliveryTag(), false);
            }
            eq(got, Arrays.asList("1:true", "2:true", "3:false", "4:false"), "order and flags");
            conn.close();
        });

        scenario("prefetch_limits_unacked_deliveries", new String[] {"basic.qos", "basic.qos-ok", "basic.consume",
                "basic.consume-ok", "basic.deliver", "basic.cancel", "basic.cancel-ok"}, () -> {
            Connection conn = open();
            Channel ch = conn.createChannel();
            String q = ch.queueDeclare().getQueue();
            for (int i = 0; i < 10; i++) ch.basicPublish("", q, null, b(String.valueOf(i)));
            ch.basicQos(3);
            BlockingQueue<Long> tags = new LinkedBlockingQueue<>();
            String tag = ch.basicConsume(q, false, new DefaultConsumer(ch) {
                @Override
                public void handleDelivery(String t, Envelope e, AMQP.BasicProperties p, byte[] body) {
                    tags.add(e.getDeliveryTag());
                }
            });
            Thread.sleep(500);
            eq(tags.size(), 3, "prefetch 3");
            ch.basicAck(3, true);
            long deadline = System.currentTimeMillis() + 3000;
            while (tags.size() < 6 && System.currentTimeMillis() < deadline) Thread.sleep(20);
            eq(tags.size(), 6, "three more after a multiple ack");
            ch.basicCancel(tag);
            conn.close();
        });

        scenario("confirms_returns_and_transactions", new String[] {"confirm.select", "confirm.select-ok", "basic.return",
                "tx.select", "tx.select-ok", "tx.commit", "tx.commit-ok", "tx.rollback", "tx.rollback-ok",
                "ext:publisher-confirms"}, () -> {
            Connection conn = open();
            Channel ch = conn.createChannel();
            List<Integer> returned = new CopyOnWriteArrayList<>();
            ch.addReturnListener((code, text, x, key, props, body) -> returned.add(code));
            ch.confirmSelect();
            String q = ch.queueDeclare(name("durable"), true, false, false, null).getQueue();
            for (int i = 0; i < 20; i++) ch.basicPublish("", q, MessageProperties.PERSISTENT_BASIC, b("p" + i));
            ch.basicPublish("", name("nowhere"), true, null, b("lost"));
            ch.waitForConfirmsOrDie(5000);
            eq(ch.queueDeclarePassive(q).getMessageCount(), 20, "confirmed and queued");
            eq(returned, Collections.singletonList(312), "returned");
            ch.queueDelete(q);
            Channel tx = conn.createChannel();
            String tq = tx.queueDeclare().getQueue();
            tx.txSelect();
            tx.basicPublish("", tq, null, b("no"));
            tx.txRollback();
            tx.basicPublish("", tq, null, b("yes"));
            tx.txCommit();
            eq(get(tx, tq), "yes", "only the committed message");
            conn.close();
        });

        scenario("recover_requeues_unacked", new String[] {"basic.recover", "basic.recover-ok"}, () -> {
            Connection conn = open();
            Channel ch = conn.createChannel();
            String q = ch.queueDeclare().getQueue();
            ch.basicPublish("", q, null, b("again"));
            check(!ch.basicGet(q, false).getEnvelope().isRedeliver(), "first");
            ch.basicRecover(true);
            GetResponse r = ch.basicGet(q, true);
            check(r != null && r.getEnvelope().isRedeliver(), "redelivered after recover");
            conn.close();
        });

        scenario("error_codes", new String[] {"channel.close", "exchange.declare", "queue.declare", "queue.delete",
                "queue.purge", "queue.purge-ok", "queue.delete-ok", "exchange.delete", "exchange.delete-ok"}, () -> {
            Connection conn = open();
            final Channel c1 = conn.createChannel();
            eq(channelError(() -> c1.queueDeclarePassive(name("missing"))), 404, "missing queue");
            final Channel c2 = conn.createChannel();
            eq(channelError(() -> c2.queueDeclare("amq.reserved", false, false, false, null)), 403, "amq. prefix");
            final Channel c3 = conn.createChannel();
            String x = name("x");
            c3.exchangeDeclare(x, "direct");
            eq(channelError(() -> c3.exchangeDeclare(x, "topic")), 406, "inequivalent");
            Channel c4 = conn.createChannel();
            c4.exchangeDelete(x);
            String q = c4.queueDeclare(name("q"), false, false, false, null).getQueue();
            c4.basicPublish("", q, null, b("1"));
            c4.queueDeclarePassive(q);
            final Channel c5 = c4;
            eq(channelError(() -> c5.queueDelete(q, false, true)), 406, "if-empty");
            Channel c6 = conn.createChannel();
            eq(c6.queuePurge(q).getMessageCount(), 1, "purged");
            eq(c6.queueDelete(q).getMessageCount(), 0, "deleted");
            Connection other = open();
            final Channel mine = conn.createChannel();
            String excl = mine.queueDeclare(name("excl"), false, true, false, null).getQueue();
            final Channel theirs = other.createChannel();
            eq(channelError(() -> theirs.queueDeclarePassive(excl)), 405, "exclusive");
            other.close();
            conn.close();
        });

        scenario("reconnect_after_a_server_close", new String[] {"connection.close", "ext:management-close"}, () -> {
            String tagName = name("closeme");
            ConnectionFactory f = new ConnectionFactory();
            f.setUri(broker);
            f.setAutomaticRecoveryEnabled(false);
            Connection conn = f.newConnection(tagName);
            BlockingQueue<Integer> closed = new LinkedBlockingQueue<>();
            conn.addShutdownListener(e -> {
                if (e.getReason() instanceof AMQP.Connection.Close) closed.add(((AMQP.Connection.Close) e.getReason()).getReplyCode());
            });
            String target = null;
            for (int i = 0; i < 50 && target == null; i++) {
                target = connectionNamed(api("GET", "/api/connections"), tagName);
                if (target == null) Thread.sleep(200);
            }
            check(target != null && target.contains("->"), "listed: " + target);
            api("DELETE", "/api/connections/" + java.net.URLEncoder.encode(target, "UTF-8").replace("+", "%20"));
            eq(closed.poll(10, TimeUnit.SECONDS), 320, "CONNECTION_FORCED");
            Connection again = open();
            again.createChannel().queueDeclare();
            again.close();
        });

        scenario("ttl_dead_lettering_priorities_alternate", new String[] {"ext:x-message-ttl", "ext:dead-lettering",
                "ext:x-death", "ext:x-max-priority", "ext:alternate-exchange"}, () -> {
            Connection conn = open();
            Channel ch = conn.createChannel();
            String dlq = ch.queueDeclare().getQueue();
            Map<String, Object> qa = new HashMap<>();
            qa.put("x-message-ttl", 100);
            qa.put("x-dead-letter-exchange", "");
            qa.put("x-dead-letter-routing-key", dlq);
            String q = ch.queueDeclare("", false, true, true, qa).getQueue();
            ch.basicPublish("", q, null, b("expires"));
            Thread.sleep(500);
            GetResponse dead = ch.basicGet(dlq, true);
            check(dead != null, "a dead letter");
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> deaths = (List<Map<String, Object>>) dead.getProps().getHeaders().get("x-death");
            eq(String.valueOf(deaths.get(0).get("reason")), "expired", "x-death reason");
            Map<String, Object> pa = new HashMap<>();
            pa.put("x-max-priority", 5);
            String p = ch.queueDeclare("", false, true, true, pa).getQueue();
            for (Object[] m : new Object[][] {{"low", 1}, {"high", 5}, {"mid", 3}}) {
                ch.basicPublish("", p, new AMQP.BasicProperties.Builder().priority((Integer) m[1]).build(), b((String) m[0]));
            }
            ch.queueDeclarePassive(p);
            eq(Arrays.asList(get(ch, p), get(ch, p), get(ch, p)), Arrays.asList("high", "mid", "low"), "priority order");
            String ae = name("ae"), x = name("main");
            ch.exchangeDeclare(ae, "fanout", false, true, null);
            Map<String, Object> xa = new HashMap<>();
            xa.put("alternate-exchange", ae);
            ch.exchangeDeclare(x, "direct", false, true, xa);
            String caught = ch.queueDeclare().getQueue();
            ch.queueBind(caught, ae, "");
            ch.basicPublish(x, "unbound", null, b("caught"));
            ch.queueDeclarePassive(caught);
            eq(get(ch, caught), "caught", "alternate exchange");
            conn.close();
        });

        scenario("large_and_empty_messages", new String[] {"basic.publish", "basic.get-ok"}, () -> {
            Connection conn = open();
            Channel ch = conn.createChannel();
            String q = ch.queueDeclare().getQueue();
            byte[] big = new byte[3 * 1024 * 1024 + 17];
            new Random(7).nextBytes(big);
            ch.basicPublish("", q, null, new byte[0]);
            ch.basicPublish("", q, null, big);
            eq(ch.basicGet(q, true).getBody().length, 0, "empty");
            check(Arrays.equals(ch.basicGet(q, true).getBody(), big), "3 MiB over many frames");
            conn.close();
        });

        for (Object[] s : scenarios) {
            long t0 = System.currentTimeMillis();
            String status = "passed", error = null;
            try {
                ((Body) s[2]).run();
            } catch (Throwable e) {
                status = "failed";
                error = e.toString();
            }
            StringBuilder covers = new StringBuilder("[");
            for (String c : (String[]) s[1]) covers.append(covers.length() > 1 ? "," : "").append(json(c));
            covers.append("]");
            System.out.println("{\"suite\":\"java\",\"scenario\":" + json((String) s[0]) + ",\"status\":\"" + status
                    + "\",\"covers\":" + covers + ",\"target\":null,\"differs\":null,\"error\":" + json(error)
                    + ",\"seconds\":" + (System.currentTimeMillis() - t0) / 1000.0 + "}");
        }
        System.exit(0);
    }
}
