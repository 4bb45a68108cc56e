/* The libcurl C client of the benchmark: what libcurl's multi interface does with no
 * language runtime around it. Bodies are counted and dropped.
 *   curl-multi get URL                 one transfer
 *   curl-multi many URL PARALLEL COUNT COUNT transfers of URL, PARALLEL at a time
 * PORTER_BENCH_CA names a CA file to trust.
 * Built by Benchmarks/run.sh with: cc -O2 -o curl-multi curl-multi.c -lcurl */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>

static size_t total;

static size_t sink(char *data, size_t size, size_t n, void *user) {
    (void)data; (void)user;
    total += size * n;
    return size * n;
}

static CURL *make(CURLM *multi, const char *url) {
    CURL *easy = curl_easy_init();
    if (!easy) return NULL;
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 1L);
    /* PORTER_BENCH_CA: the test CA of the https workload. */
    const char *ca = getenv("PORTER_BENCH_CA");
    if (ca) curl_easy_setopt(easy, CURLOPT_CAINFO, ca);
    curl_multi_add_handle(multi, easy);
    return easy;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: curl-multi get URL | many URL PARALLEL COUNT\n"); return 2; }
    int parallel = 1, count = 1;
    if (argv[1][0] == 'm') {
        if (argc < 5) return 2;
        parallel = atoi(argv[3]);
        count = atoi(argv[4]);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)parallel);
    int started = 0, done = 0, failed = 0, running = 0;
    while (started < count && started < parallel) { make(multi, argv[2]); started++; }
    while (done < count) {
        curl_multi_perform(multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            long status = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            if (msg->data.result != CURLE_OK || status != 200) failed++;
            /* Reuse the handle, as a client that keeps its handles would. */
            curl_multi_remove_handle(multi, msg->easy_handle);
            done++;
            if (started < count) {
                curl_multi_add_handle(multi, msg->easy_handle);
                started++;
            } else {
                curl_easy_cleanup(msg->easy_handle);
            }
        }
        if (done < count) curl_multi_poll(multi, NULL, 0, 1000, NULL);
    }
    curl_multi_cleanup(multi);
    curl_global_cleanup();
    if (failed) { fprintf(stderr, "curl-multi: %d transfers failed\n", failed); return 1; }
    fprintf(stderr, "curl-multi: %d transfers, %zu bytes\n", done, total);
    return 0;
}
