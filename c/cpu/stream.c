/* stream.c: cpu streams and events. Work runs in order as it is issued, so a stream has no
 * state: events are complete once recorded, waits are satisfied already, and the debug
 * spin has nothing to delay. The handles exist so callers treat both backends alike. */
#include <stdlib.h>

#include "cpu.h"

struct shim_stream { int unused; };
struct shim_event { int unused; };

int shim_stream_create(shim_stream **out) {
  SHIM_REQUIRE(out, "out");
  *out = calloc(1, sizeof **out);
  return *out ? SHIM_OK : shim_fail(SHIM_E_NOMEM, "shim_stream_create: out of host memory");
}

int shim_stream_destroy(shim_stream *s) {
  SHIM_REQUIRE(s, "s (the default stream cannot be destroyed)");
  free(s);
  return SHIM_OK;
}

int shim_stream_synchronize(shim_stream *s) { return SHIM_OK; }

int shim_event_create(shim_event **out) {
  SHIM_REQUIRE(out, "out");
  *out = calloc(1, sizeof **out);
  return *out ? SHIM_OK : shim_fail(SHIM_E_NOMEM, "shim_event_create: out of host memory");
}

int shim_event_destroy(shim_event *e) {
  SHIM_REQUIRE(e, "e");
  free(e);
  return SHIM_OK;
}

int shim_event_record(shim_event *e, shim_stream *s) {
  SHIM_REQUIRE(e, "e");
  return SHIM_OK;
}

int shim_stream_wait_event(shim_stream *s, shim_event *e) {
  SHIM_REQUIRE(e, "e");
  return SHIM_OK;
}

int shim_event_query(shim_event *e, int32_t *done) {
  SHIM_REQUIRE(e, "e");
  SHIM_REQUIRE(done, "done");
  *done = 1;
  return SHIM_OK;
}

int shim_event_synchronize(shim_event *e) {
  SHIM_REQUIRE(e, "e");
  return SHIM_OK;
}

int shim_debug_stream_spin(shim_stream *s, int64_t microseconds) {
  if (microseconds < 0) return shim_fail(SHIM_E_INVALID, "shim_debug_stream_spin: negative duration %lld", (long long)microseconds);
  return SHIM_OK;
}
