/* A load generator at C speed, so that broker figures are not bounded by a Python client.
 *
 * Built by benchmarks/latency.py at benchmark time:
 *   gcc -O2 -o loadgen benchmarks/loadgen.c -lrdkafka
 *
 *   loadgen produce BOOTSTRAP TOPIC PARTITION RECORDS RECORD_BYTES
 *       librdkafka producer, acks=1, linger 5 ms, 1 MiB batches, no compression; prints
 *       "records seconds errors" once every record is acknowledged.
 *   loadgen consume BOOTSTRAP TOPIC PARTITION RECORDS
 *       librdkafka consumer assigned the partition from offset 0; prints "records seconds errors"
 *       once RECORDS records were read (or after 300 s).
 *   loadgen frames HOST PORT FILE CONNECTIONS WARMUP_S MEASURE_S
 *       raw Kafka frames: FILE holds a window of complete request frames; each connection keeps
 *       two windows in flight (a window is sent again whenever one has been answered). Prints
 *       "measuring" after the warm-up and "answers seconds" at the end, for the caller to read
 *       the broker's CPU time in between.
 *   loadgen paced HOST PORT FILE RATE WARMUP_S MEASURE_S
 *       raw Kafka frames at a steady rate over one connection: FILE's frames are sent one at a
 *       time, one every 1/RATE s by the clock (cycling through FILE), whatever is still unanswered.
 *       Prints "measuring" after the warm-up and "answers seconds p50_us p99_us max_us" at the
 *       end: the answers counted in between and their round trips (send to the whole answer read).
 */
#define _GNU_SOURCE /* ppoll */
#include <arpa/inet.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_S 300.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "loadgen: %s\n", what);
    exit(2);
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char error[256];
    if (rd_kafka_conf_set(conf, name, value, error, sizeof error) != RD_KAFKA_CONF_OK) die(error);
}

static long delivered, delivery_errors;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *message, void *opaque) {
    (void)rk;
    (void)opaque;
    if (message->err) delivery_errors++;
    else delivered++;
}

static int produce(const char *bootstrap, const char *topic, int partition, long records, int size) {
    char error[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "acks", "1");
    set(conf, "linger.ms", "5");
    set(conf, "batch.size", "1048576");
    set(conf, "batch.num.messages", "100000");
    set(conf, "queue.buffering.max.messages", "2000000");
    set(conf, "queue.buffering.max.kbytes", "2097151");
    set(conf, "compression.type", "none");
    set(conf, "message.timeout.ms", "300000");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error);
    if (!rk) die(error);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *metadata;
    if (rd_kafka_metadata(rk, 0, rkt, &metadata, 30000)) die("no metadata");
    rd_kafka_metadata_destroy(metadata);
    char *payload = malloc(size);
    for (int i = 0; i < size; i++) payload[i] = (char)(i * 31 + 7);
    double started = now_s();
    for (long i = 0; i < records; i++) {
        /* The payload is never freed or changed while queued: no copy per record. */
        while (rd_kafka_produce(rkt, partition, 0, payload, size, NULL, 0, NULL) == -1) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) die("produce failed");
            rd_kafka_poll(rk, 1);
        }
        if ((i & 0xFFFF) == 0) rd_kafka_poll(rk, 0);
    }
    while (delivered + delivery_errors < records && now_s() - started < TIMEOUT_S) rd_kafka_poll(rk, 10);
    double seconds = now_s() - started;
    printf("%ld %.6f %ld\n", delivered, seconds, delivery_errors + (records - delivered - delivery_errors));
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(payload);
    return 0;
}

static int consume(const char *bootstrap, const char *topic, int partition, long records) {
    char error[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "group.id", "strom-loadgen"); /* never joined: the partition is assigned */
    set(conf, "enable.auto.commit", "false");
    set(conf, "fetch.max.bytes", "67108864");
    set(conf, "max.partition.fetch.bytes", "4194304");
    set(conf, "queued.min.messages", "2000000");
    set(conf, "queued.max.messages.kbytes", "1048576");
    set(conf, "fetch.wait.max.ms", "100");
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof error);
    if (!rk) die(error);
    rd_kafka_topic_partition_list_t *assignment = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(assignment, topic, partition)->offset = 0;
    double started = now_s();
    if (rd_kafka_assign(rk, assignment)) die("assign failed");
    rd_kafka_queue_t *queue = rd_kafka_queue_get_consumer(rk);
    rd_kafka_message_t *messages[10000];
    long read = 0, errors = 0;
    while (read < records && now_s() - started < TIMEOUT_S) {
        ssize_t got = rd_kafka_consume_batch_queue(queue, 1000, messages, 10000);
        for (ssize_t i = 0; i < got; i++) {
            if (messages[i]->err == RD_KAFKA_RESP_ERR_NO_ERROR) read++;
            else if (messages[i]->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) errors++;
            rd_kafka_message_destroy(messages[i]);
        }
    }
    double seconds = now_s() - started;
    printf("%ld %.6f %ld\n", read, seconds, errors);
    rd_kafka_queue_destroy(queue);
    rd_kafka_topic_partition_list_destroy(assignment);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return 0;
}

/* -- raw frames ----------------------------------------------------------------------------- */

struct link {
    int fd;
    long in_window;    /* answers counted towards the current window */
    size_t have;       /* bytes of the current answer's size prefix or body read so far */
    size_t need;       /* 4 while reading a size prefix, else the body's size */
    int reading_body;
    unsigned char prefix[4];
};

static void send_all(int fd, const char *data, size_t size) {
    while (size) {
        ssize_t sent = write(fd, data, size);
        if (sent < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                struct pollfd wait = {fd, POLLOUT, 0};
                poll(&wait, 1, 1000);
                continue;
            }
            die("write failed");
        }
        data += sent;
        size -= (size_t)sent;
    }
}

/* Takes the next got bytes a connection read; returns how many answers they completed. */
static long take_answers(struct link *link, const char *buffer, ssize_t got) {
    long done = 0;
    for (ssize_t at = 0; at < got;) {
        size_t take = link->need - link->have;
        if (take > (size_t)(got - at)) take = (size_t)(got - at);
        if (!link->reading_body) memcpy(link->prefix + link->have, buffer + at, take);
        link->have += take;
        at += (ssize_t)take;
        if (link->have < link->need) break;
        link->have = 0;
        if (!link->reading_body) {
            uint32_t length;
            memcpy(&length, link->prefix, 4);
            link->need = ntohl(length);
            link->reading_body = 1;
            if (link->need) continue;
        }
        link->reading_body = 0;
        link->need = 4;
        done++;
    }
    return done;
}

static long count_frames(const char *data, size_t size) {
    long frames = 0;
    size_t at = 0;
    while (at + 4 <= size) {
        uint32_t length;
        memcpy(&length, data + at, 4);
        at += 4 + ntohl(length);
        frames++;
    }
    if (at != size) die("the frames file does not hold whole frames");
    return frames;
}

/* The whole frames file, malloc'd; its size in *size. */
static char *read_frames_file(const char *path, long *size) {
    FILE *file = fopen(path, "rb");
    if (!file) die("cannot open the frames file");
    fseek(file, 0, SEEK_END);
    *size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *data = malloc(*size);
    if (fread(data, 1, *size, file) != (size_t)*size) die("cannot read the frames file");
    fclose(file);
    return data;
}

static int frames(const char *host, int port, const char *path, int connections, double warmup_s,
                  double measure_s) {
    long window_bytes;
    char *window = read_frames_file(path, &window_bytes);
    long window_frames = count_frames(window, window_bytes);
    struct link *links = calloc(connections, sizeof *links);
    struct pollfd *polls = calloc(connections, sizeof *polls);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &address.sin_addr);
    for (int i = 0; i < connections; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, (struct sockaddr *)&address, sizeof address)) die("connect failed");
        links[i] = (struct link){.fd = fd, .need = 4};
        polls[i] = (struct pollfd){fd, POLLIN, 0};
        send_all(fd, window, window_bytes);
        send_all(fd, window, window_bytes);
    }
    static char buffer[1 << 20];
    long answers = 0, counted_from = -1;
    double started = now_s(), measuring_at = 0;
    for (;;) {
        double now = now_s();
        if (counted_from < 0 && now - started >= warmup_s) {
            counted_from = answers;
            measuring_at = now;
            printf("measuring\n");
            fflush(stdout);
        }
        if (counted_from >= 0 && now - measuring_at >= measure_s) break;
        if (poll(polls, connections, 100) < 0 && errno != EINTR) die("poll failed");
        for (int i = 0; i < connections; i++) {
            if (!(polls[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            struct link *link = &links[i];
            ssize_t got = read(link->fd, buffer, sizeof buffer);
            if (got <= 0) die("the broker closed a connection");
            long done = take_answers(link, buffer, got);
            answers += done;
            for (link->in_window += done; link->in_window >= window_frames; link->in_window -= window_frames)
                send_all(link->fd, window, window_bytes);
        }
    }
    printf("%ld %.6f\n", answers - counted_from, now_s() - measuring_at);
    for (int i = 0; i < connections; i++) close(links[i].fd);
    free(window);
    free(links);
    free(polls);
    return 0;
}

/* -- raw frames at a steady rate ---------------------------------------------------------------- */

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int paced(const char *host, int port, const char *path, double rate, double warmup_s,
                 double measure_s) {
    long file_bytes;
    char *data = read_frames_file(path, &file_bytes);
    long frame_count = count_frames(data, file_bytes);
    size_t *starts = calloc(frame_count + 1, sizeof *starts);
    for (long i = 0, at = 0; i < frame_count; i++) {
        uint32_t length;
        memcpy(&length, data + at, 4);
        starts[i] = (size_t)at;
        at += 4 + ntohl(length);
        starts[i + 1] = (size_t)at;
    }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &address.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&address, sizeof address)) die("connect failed");
    /* Send times of the requests not yet answered (answers come in order on one connection). */
    long ring_size = 1 << 16;
    double *sent_at = calloc(ring_size, sizeof *sent_at);
    long sent = 0, answered = 0, counted_from = -1;
    long samples_max = (long)(rate * measure_s) + 16, samples = 0;
    double *round_trips = calloc(samples_max, sizeof *round_trips);
    static char buffer[1 << 20];
    struct link link = {.fd = fd, .need = 4};
    double interval = 1.0 / rate, started = now_s(), measuring_at = 0;
    for (;;) {
        double now = now_s();
        if (counted_from < 0 && now - started >= warmup_s) {
            counted_from = answered;
            measuring_at = now;
            printf("measuring\n");
            fflush(stdout);
        }
        if (counted_from >= 0 && now - measuring_at >= measure_s) break;
        double due = started + sent * interval;
        if (now >= due) {
            if (sent - answered >= ring_size) die("too many requests unanswered");
            long frame = sent % frame_count;
            sent_at[sent % ring_size] = now;
            send_all(fd, data + starts[frame], starts[frame + 1] - starts[frame]);
            sent++;
            continue;
        }
        double wait_s = due - now;
        struct timespec timeout = {0, (long)(wait_s * 1e9)};
        struct pollfd readable = {fd, POLLIN, 0};
        if (ppoll(&readable, 1, &timeout, NULL) < 0 && errno != EINTR) die("poll failed");
        if (!(readable.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t got = read(fd, buffer, sizeof buffer);
        if (got <= 0) die("the broker closed the connection");
        double read_at = now_s();
        for (long done = take_answers(&link, buffer, got); done > 0; done--) {
            if (counted_from >= 0 && samples < samples_max)
                round_trips[samples++] = read_at - sent_at[answered % ring_size];
            answered++;
        }
    }
    double seconds = now_s() - measuring_at;
    qsort(round_trips, samples, sizeof *round_trips, compare_doubles);
    double p50 = samples ? round_trips[samples / 2] : 0, p99 = samples ? round_trips[samples * 99 / 100] : 0;
    double slowest = samples ? round_trips[samples - 1] : 0;
    printf("%ld %.6f %.1f %.1f %.1f\n", answered - counted_from, seconds, p50 * 1e6, p99 * 1e6, slowest * 1e6);
    close(fd);
    free(data);
    free(starts);
    free(sent_at);
    free(round_trips);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "produce"))
        return produce(argv[2], argv[3], atoi(argv[4]), atol(argv[5]), atoi(argv[6]));
    if (argc == 6 && !strcmp(argv[1], "consume"))
        return consume(argv[2], argv[3], atoi(argv[4]), atol(argv[5]));
    if (argc == 8 && !strcmp(argv[1], "frames"))
        return frames(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), atof(argv[6]), atof(argv[7]));
    if (argc == 8 && !strcmp(argv[1], "paced"))
        return paced(argv[2], atoi(argv[3]), argv[4], atof(argv[5]), atof(argv[6]), atof(argv[7]));
    fprintf(stderr,
            "usage: loadgen produce BOOTSTRAP TOPIC PARTITION RECORDS RECORD_BYTES\n"
            "       loadgen consume BOOTSTRAP TOPIC PARTITION RECORDS\n"
            "       loadgen frames HOST PORT FILE CONNECTIONS WARMUP_S MEASURE_S\n"
            "       loadgen paced HOST PORT FILE RATE WARMUP_S MEASURE_S\n");
    return 2;
}
