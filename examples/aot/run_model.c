/* run_model: call a program exported by tidal.export, without Python.
 *
 *   run_model DIR
 *
 * Reads the program's inputs from DIR/in<i>.bin (raw row-major data) and DIR/in<i>.shape (one
 * line: dtype, then the sizes), calls the library's entry point, writes each output to
 * DIR/got<i>.bin and DIR/got<i>.shape, and when DIR/out<i>.bin holds an expected output (eager
 * PyTorch's, from example_io.py) compares with it: floats within atol 1e-5 + rtol 1e-4, integers and
 * booleans exactly. Exit status 0 when every output matches (or nothing was expected), else 1.
 *
 * Built against one exported library: TIDAL_MODEL names it (its header TIDAL_MODEL.h declares
 * TIDAL_MODEL_run and the rest); see CMakeLists.txt, or with plain cc:
 *   cc -DTIDAL_MODEL=rnn_scan -I build/aot run_model.c build/aot/rnn_scan.so -Wl,-rpath,build/aot
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TIDAL_MODEL
#error "define TIDAL_MODEL as the exported library's name (-DTIDAL_MODEL=rnn_scan)"
#endif
#define STR2(x) #x
#define STR(x) STR2(x)
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#include STR(TIDAL_MODEL.h)

#define RUN CAT(TIDAL_MODEL, _run)
#define LAST_ERROR CAT(TIDAL_MODEL, _last_error)
#define NUM_INPUTS CAT(TIDAL_MODEL, _num_inputs)
#define NUM_OUTPUTS CAT(TIDAL_MODEL, _num_outputs)
#define INPUT_INFO CAT(TIDAL_MODEL, _input_info)
#define OUTPUT_INFO CAT(TIDAL_MODEL, _output_info)

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *data = malloc(n > 0 ? (size_t)n : 1);
  if (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *size = (size_t)(n > 0 ? n : 0);
  return data;
}

/* "dtype d0 d1 ..." → dtype and sizes; returns the rank, or -1. */
static int read_shape(const char *path, char *dtype, int64_t *shape) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int rank = -1;
  if (fscanf(f, "%31s", dtype) == 1) {
    rank = 0;
    long long d;
    while (rank < TIDAL_MAX_RANK && fscanf(f, "%lld", &d) == 1) shape[rank++] = d;
  }
  fclose(f);
  return rank;
}

static size_t numel(const int64_t *shape, int rank) {
  size_t n = 1;
  for (int d = 0; d < rank; d++) n *= (size_t)shape[d];
  return n;
}

/* Largest violation of |got - want| <= atol + rtol |want| (0 when within), NaN where they differ. */
static double mismatch(const char *dtype, const void *got, const void *want, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double g, w, tol = 0;
    if (!strcmp(dtype, "float32")) {
      g = ((const float *)got)[i], w = ((const float *)want)[i], tol = 1e-5 + 1e-4 * fabs(w);
    } else if (!strcmp(dtype, "float64")) {
      g = ((const double *)got)[i], w = ((const double *)want)[i], tol = 1e-7 + 1e-7 * fabs(w);
    } else if (!strcmp(dtype, "int64")) {
      g = (double)((const long long *)got)[i], w = (double)((const long long *)want)[i];
    } else if (!strcmp(dtype, "int32")) {
      g = ((const int *)got)[i], w = ((const int *)want)[i];
    } else { /* bool, uint8, int8: one byte */
      g = ((const unsigned char *)got)[i], w = ((const unsigned char *)want)[i];
    }
    if (isnan(g) != isnan(w)) return NAN;
    double excess = isnan(g) ? 0 : fabs(g - w) - tol;
    if (excess > worst) worst = excess;
  }
  return worst;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR   (DIR holds in<i>.bin/.shape; see example_io.py)\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  char path[4096], dtype[32];
  int n_in = NUM_INPUTS(), n_out = NUM_OUTPUTS();
  tidal_tensor *inputs = calloc((size_t)n_in + 1, sizeof *inputs);
  tidal_tensor *outputs = calloc((size_t)n_out + 1, sizeof *outputs);
  for (int i = 0; i < n_in; i++) {
    const tidal_tensor_info *info = INPUT_INFO(i);
    snprintf(path, sizeof path, "%s/in%d.shape", dir, i);
    int rank = read_shape(path, dtype, inputs[i].shape);
    if (rank != info->rank || strcmp(dtype, info->dtype)) {
      fprintf(stderr, "%s: expected %s of rank %d for input %d (%s)\n", path, info->dtype, info->rank, i, info->name);
      return 2;
    }
    size_t size;
    snprintf(path, sizeof path, "%s/in%d.bin", dir, i);
    inputs[i].data = read_file(path, &size);
    if (!inputs[i].data || size != numel(inputs[i].shape, rank) * (size_t)info->itemsize) {
      fprintf(stderr, "%s: missing, or not %zu bytes\n", path, numel(inputs[i].shape, rank) * (size_t)info->itemsize);
      return 2;
    }
  }
  if (RUN(inputs, outputs) != 0) {
    fprintf(stderr, "%s_run failed: %s\n", STR(TIDAL_MODEL), LAST_ERROR());
    return 1;
  }
  int ok = 1;
  for (int i = 0; i < n_out; i++) {
    const tidal_tensor_info *info = OUTPUT_INFO(i);
    size_t n = numel(outputs[i].shape, info->rank), bytes = n * (size_t)info->itemsize;
    snprintf(path, sizeof path, "%s/got%d.bin", dir, i);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(outputs[i].data, 1, bytes, f) != bytes) {
      fprintf(stderr, "cannot write %s\n", path);
      return 2;
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/got%d.shape", dir, i);
    f = fopen(path, "w");
    fprintf(f, "%s", info->dtype);
    for (int d = 0; d < info->rank; d++) fprintf(f, " %lld", (long long)outputs[i].shape[d]);
    fprintf(f, "\n");
    fclose(f);

    printf("output %d (%s %s [", i, info->name, info->dtype);
    for (int d = 0; d < info->rank; d++) printf(d ? ", %lld" : "%lld", (long long)outputs[i].shape[d]);
    printf("]): ");
    int64_t want_shape[TIDAL_MAX_RANK];
    char want_dtype[32];
    snprintf(path, sizeof path, "%s/out%d.shape", dir, i);
    int want_rank = read_shape(path, want_dtype, want_shape);
    if (want_rank < 0) {
      printf("written (nothing to compare with)\n");
      continue;
    }
    int same_shape = want_rank == info->rank && !strcmp(want_dtype, info->dtype);
    for (int d = 0; same_shape && d < want_rank; d++) same_shape = want_shape[d] == outputs[i].shape[d];
    size_t size;
    snprintf(path, sizeof path, "%s/out%d.bin", dir, i);
    void *want = read_file(path, &size);
    if (!same_shape || !want || size != bytes) {
      printf("MISMATCH: expected %s of another shape\n", want_dtype);
      ok = 0;
    } else {
      double excess = mismatch(info->dtype, outputs[i].data, want, n);
      if (excess == 0) {
        printf("matches eager\n");
      } else {
        printf("MISMATCH: exceeds the tolerance by %g\n", excess);
        ok = 0;
      }
    }
    free(want);
    free(outputs[i].data);
  }
  for (int i = 0; i < n_in; i++) free(inputs[i].data);
  free(inputs);
  free(outputs);
  return ok ? 0 : 1;
}
