"""The application runtime (NNAPI's runtime/): what an application calls. Model building, compilation
(partitioning across devices, caching), executions (sync, async, burst, fenced), memories and memory
domains, the device list and driver plugins. It reaches drivers only through the HAL."""
