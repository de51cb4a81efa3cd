// Produce: the redrive interop producer on Apache Kafka's Java client.
//
//   java -cp <kafka-clients jars>:<dir> Produce BROKERS < spec
//
// spec has one record a line, tab-separated: topic, compression, key,
// value, timestamp, headers. key and value are base64 ("-": null),
// timestamp is Unix ms ("-": the producer's clock), headers is "" or
// comma-separated name:value pairs, both base64 (value "-": a null value).
// One producer per compression type; exits 1 if a send failed.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Produce {
    static byte[] b64(String s) { return s.equals("-") ? null : Base64.getDecoder().decode(s); }

    public static void main(String[] args) throws Exception {
        Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isEmpty()) continue;
            String[] f = line.split("\t", -1);
            KafkaProducer<byte[], byte[]> p = producers.computeIfAbsent(f[1], comp -> {
                Properties c = new Properties();
                c.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
                c.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, comp);
                c.put(ProducerConfig.ACKS_CONFIG, "all");
                c.put(ProducerConfig.LINGER_MS_CONFIG, 20);
                return new KafkaProducer<>(c, new ByteArraySerializer(), new ByteArraySerializer());
            });
            Long ts = f[4].equals("-") ? null : Long.valueOf(f[4]);
            ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(f[0], null, ts, b64(f[2]), b64(f[3]));
            for (String pair : f[5].split(",")) {
                if (pair.isEmpty()) continue;
                String[] kv = pair.split(":", -1);
                r.headers().add(new RecordHeader(new String(b64(kv[0]), StandardCharsets.UTF_8), b64(kv[1])));
            }
            sent.add(p.send(r));
        }
        for (KafkaProducer<byte[], byte[]> p : producers.values()) p.flush();
        int failed = 0;
        for (Future<RecordMetadata> s : sent) {
            try { s.get(); } catch (Exception e) { failed++; System.err.println("send: " + e.getCause()); }
        }
        for (KafkaProducer<byte[], byte[]> p : producers.values()) p.close();
        System.exit(failed == 0 ? 0 : 1);
    }
}
