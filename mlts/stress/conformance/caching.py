"""Conformance: compilation caching on a driver that asks for cache files. A second compilation with
the same token prepares from the cache and gives the same results; a cache that is corrupt, truncated,
or another model's (planted under this model's token) must never be used as it is: the driver
recompiles (or refuses the cache) and the results stay right. Caching is optional: on a driver that
needs no cache files every check is n/a and the test is SKIPPED (nothing of the driver was tested)."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from typing import Any, Callable

from ...runtime import Compilation
from ...runtime.app.compilation_cache import cache_files_needed
from ..context import StressContext
from .checks import CheckFailed, Checks, NotApplicable, compile_on, driver_model, execute, expect_outputs
from .models import F32, U8, affine_model


def _token(name: str) -> bytes:
    return hashlib.sha256(f"mlts-conformance/{name}".encode()).digest()


def caching(ctx: StressContext) -> dict[str, Any]:
    checks = Checks(ctx, "compilation caching")
    needed = cache_files_needed(ctx.device)
    if needed == (0, 0):
        checks.skip("caching", f"{ctx.driver} needs no cache files (caching is optional)")
        return checks.finish()
    pair = next(((affine_model(code, 0), affine_model(code, 1)) for code in (F32, U8)
                 if driver_model(ctx, [affine_model(code, 0)]) is not None), None)
    if pair is None:
        return checks.without_model()
    model_a, model_b = pair
    work = tempfile.mkdtemp(prefix="mlts-conformance-cache-", dir=str(ctx.work_dir))

    def cached(m, directory: str, token: bytes) -> Compilation:
        return compile_on(ctx, m, caching=(directory, token))

    def files_of(c: Compilation) -> list[str]:
        files = [f for r in c.cache_reports for f in r.files]
        if not files:
            raise CheckFailed(f"the compilation reports no cache files (status {c.cache_status})")
        return files

    def fresh_dir(name: str) -> str:
        d = os.path.join(work, name)
        os.makedirs(d)
        return d

    def right(c: Compilation, what: str) -> None:
        expect_outputs(what, execute(c, model_a.inputs), model_a.expected())

    def second_from_cache():
        d = fresh_dir("plain")
        first = cached(model_a, d, _token("a"))
        if first.cache_status != "saved":
            raise CheckFailed(f"the first compilation's cache status is {first.cache_status!r}, expected 'saved' "
                              f"(the driver asks for {needed[0]} model and {needed[1]} data cache file(s))")
        again = cached(model_a, d, _token("a"))
        if again.cache_status != "prepared-from-cache":
            raise CheckFailed(f"the second compilation was not prepared from the cache ({again.cache_status})")
        right(again, "a compilation prepared from the cache")
        return f"{sum(os.path.getsize(f) for f in files_of(first))} bytes in {len(files_of(first))} file(s)"
    checks.run("a second compilation prepares from the cache", second_from_cache)

    def damaged(name: str, damage: Callable[[list[str], str], None]):
        def check():
            d = fresh_dir(name)
            first = cached(model_a, d, _token("a"))
            damage(files_of(first), d)
            again = cached(model_a, d, _token("a"))
            right(again, f"a compilation over a {name} cache ({again.cache_status})")
            return f"cache status {again.cache_status}, results right"
        return check

    def corrupt(files: list[str], _: str) -> None:
        for f in files:  # flip a bit near the end of every file: in constants, that is a wrong weight
            with open(f, "r+b") as fh:
                fh.seek(-1, os.SEEK_END)
                byte = fh.read(1)[0]
                fh.seek(-1, os.SEEK_END)
                fh.write(bytes([byte ^ 0x80]))

    def truncate(files: list[str], _: str) -> None:
        for f in files:
            with open(f, "r+b") as fh:
                fh.truncate(max(0, os.path.getsize(f) // 2))

    def foreign(files: list[str], d: str) -> None:
        other_dir = os.path.join(d, "other")
        os.makedirs(other_dir)
        other = cached(model_b, other_dir, _token("b"))
        others = files_of(other)
        if len(others) != len(files):
            raise NotApplicable("the other model's compilation wrote a different number of cache files")
        for src, dst in zip(others, files):  # kind by kind: model B's files under model A's names
            shutil.copyfile(src, dst)

    checks.run("a corrupt cache is not used as it is", damaged("corrupt", corrupt))
    checks.run("a truncated cache is not used", damaged("truncated", truncate))
    checks.run("another model's cache under this token is not used", damaged("foreign", foreign))

    def other_token():
        d = fresh_dir("tokens")
        cached(model_a, d, _token("a"))
        b = cached(model_b, d, _token("b"))
        if b.cache_status == "prepared-from-cache":
            raise CheckFailed("a compilation with another token was prepared from the first model's cache")
        expect_outputs("another model in the same cache directory", execute(b, model_b.inputs), model_b.expected())
    checks.run("another token does not reuse the cache", other_token)
    shutil.rmtree(work, ignore_errors=True)
    return checks.finish()


__all__ = ["caching"]
