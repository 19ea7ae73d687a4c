/* runtime/version.c - the version of the library actually loaded. */
#include "burst/version.h"

unsigned burst_version(void)
{
    return BURST_API_VERSION;
}

const char *burst_version_string(void)
{
    return BURST_VERSION_STRING;
}

#ifdef BURST_HAVE_VULKAN
#define FEATURE_VULKAN " vulkan"
#else
#define FEATURE_VULKAN ""
#endif
#ifdef BURST_HAVE_CUDA
#define FEATURE_CUDA " cuda"
#else
#define FEATURE_CUDA ""
#endif
#ifdef BURST_HAVE_FABRIC
#define FEATURE_FABRIC " fabric"
#else
#define FEATURE_FABRIC ""
#endif
#if defined(BURST_RESEARCH_SETTINGS) && BURST_RESEARCH_SETTINGS
#define FEATURE_RESEARCH " research-settings"
#else
#define FEATURE_RESEARCH ""
#endif

const char *burst_build_features(void)
{
    return "cpu" FEATURE_VULKAN FEATURE_CUDA FEATURE_FABRIC FEATURE_RESEARCH;
}
