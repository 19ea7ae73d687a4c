/*
 * burst/export.h - symbol visibility. The library is built with hidden visibility; only
 * declarations marked BURST_API are exported from the shared library.
 */
#ifndef BURST_EXPORT_H
#define BURST_EXPORT_H

#if defined(_WIN32)
#define BURST_API
#elif defined(__GNUC__) || defined(__clang__)
#define BURST_API __attribute__((visibility("default")))
#else
#define BURST_API
#endif

#endif /* BURST_EXPORT_H */
