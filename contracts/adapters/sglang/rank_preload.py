"""Imported once by the launcher's forkserver (`SGLangTpProgram.PRELOAD`): SGLang and the modules a TP rank calls,
so that each rank forks with them loaded instead of importing SGLang itself (about 16 s a rank)."""

from contracts.adapters.sglang.runtime import runtime

runtime()

import sglang.kernels.ops.speculative.dspark.dspark_schedule  # noqa: E402,F401
import sglang.srt.distributed.parallel_state  # noqa: E402,F401
import sglang.srt.mem_cache.memory_pool  # noqa: E402,F401
import sglang.srt.speculative.dflash_info_v2  # noqa: E402,F401
import sglang.srt.speculative.dspark_components.dspark_planner  # noqa: E402,F401
import sglang.srt.speculative.dspark_components.dspark_verify  # noqa: E402,F401
import sglang.srt.speculative.spec_tp_sync  # noqa: E402,F401
