"""NNAPI's generated CTS/VTS test vectors (AOSP runtime/test/specs) as an mlts conformance suite.

spec_dsl executes the spec files (build time, by tools/convert_nnapi_specs.py), store reads and writes the
committed data set under vectors/, suite builds each case through mlts.runtime and compares as NNAPI's
TestHarness does, on each execution path of paths (sync, async, burst, fenced, cached); tables summarizes
the records (per path, operations x operand types, failing cases with their replay command) for the CLI,
the HTML report and tools/cts_table.py, and junit writes them as JUnit XML."""
