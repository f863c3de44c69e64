"""Graph level on SGLang: a real `DecodeCudaGraphRunner` (its own __init__, capture sizes and width), its
`can_run_graph` and `load_batch` on a real ForwardBatch.

Substituted, with what each can hide:
* `capture()` is skipped (it records CUDA graphs): the admission and the replay padding do not read what a
  capture records, except the ragged layouts, which are not exercised here.
* the model runner is a stub with the fields the runner reads (device, pool size, model config, an
  attention backend whose replay hook records the replay view); its `decode_num_tokens_per_req` is SGLang's
  own method bound to it, so the captured width is SGLang's derivation. Hides: attention backends' own
  graph metadata.
* the TP group (`get_parallel().override(tp_group=...)`), read by the graph backend's constructor, and the
  draft checkpoint's model type (`dspark_config.draft_is_deepseek_v4`, read from the draft's config file).
"""

from __future__ import annotations

import contextlib
import types
from types import SimpleNamespace

import torch

from contracts.adapters.sglang.runtime import runtime
from contracts.boundary.graph import GraphCase, GraphObservation
from contracts.patching import patched


class _Attention:
    dllm_attention = None
    supports_ragged_verify_graph = True

    def __init__(self):
        self.views = []

    def init_cuda_graph_state(self, max_bs, max_num_token):
        pass

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def init_forward_metadata_out_graph(self, fb, in_capture=False):
        self.views.append(fb)

    def glue_draft_metadata(self):
        return "off"

    def glue_target_verify_metadata(self):
        return "off"


def _model_runner(case: GraphCase, server_args):
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    hf = SimpleNamespace(architectures=["LlamaForCausalLM"], sample_from_anchor=case.sample_from_anchor)
    mr = SimpleNamespace(
        device="cpu", gpu_id=0, is_draft_worker=case.runner == "draft", server_args=server_args,
        model_config=SimpleNamespace(is_encoder_decoder=False, hf_config=hf, hf_text_config=hf, hidden_size=16,
                                     vocab_size=32, dtype=torch.float32),
        attn_backend=_Attention(), ngram_embedding_manager=SimpleNamespace(enabled=False),
        spec_algorithm=SpeculativeAlgorithm.DSPARK, req_to_token_pool=SimpleNamespace(size=case.max_running_requests),
        lora_manager=None, hisparse_coordinator=None,
        graph_shared_output=SimpleNamespace(get_logits_buffer=lambda vocab, rows: torch.zeros(rows, vocab)),
        get_pp_proxy_topk_size=lambda: None, get_pp_proxy_residual_num_blocks=lambda: None,
        get_pp_proxy_dspark_hidden_size=lambda: None, get_aux_hidden_states_width=lambda: None,
        attn_tp_sequence_sharded=lambda *a, **k: False)
    mr.decode_num_tokens_per_req = types.MethodType(ModelRunner.decode_num_tokens_per_req, mr)
    return mr


@contextlib.contextmanager
def _dp(case: GraphCase):
    """DP attention over the case's ranks, and the draft checkpoint's model type (SGLang reads it from the draft
    model's config file: a DeepSeek-V4 draft is MoE and joins the DP gathers)."""
    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.speculative.dspark_components import dspark_config

    with patched(dspark_config, "draft_is_deepseek_v4", lambda: case.draft_is_moe):
        if case.rank_counts is None:
            yield
            return
        n = len(case.rank_counts)
        with get_parallel().override(attn_dp_enabled=True, num_dp_ranks=n, attn_dp_size=n, attn_tp_size=1, tp_size=n,
                                     moe_tp_size=n):
            yield


class SGLangGraph:
    def graph_default_capture_bs(self, max_bs: int) -> tuple:
        runtime()
        from sglang.srt.arg_groups.cuda_graph_hook import generate_decode_cuda_graph_batch_sizes

        # SGLang's own default (memory_hook calls it when no sizes are configured); of the server args it reads
        # only these two (no padding switch, a speculative algorithm).
        args = SimpleNamespace(disable_cuda_graph_padding=False, speculative_algorithm="DSPARK")
        return tuple(generate_decode_cuda_graph_batch_sizes(args, max_bs))

    def graph_admission(self, case: GraphCase) -> GraphObservation:
        rt = runtime()
        from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig, PhaseConfig
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
        from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
        from sglang.srt.runtime_context import get_context, get_exec, get_parallel
        from sglang.srt.speculative.dflash_info import DFlashVerifyInput

        config = CudaGraphConfig(decode=PhaseConfig(backend="full", max_bs=max(case.capture_bs), bs=list(case.capture_bs)))
        with rt.config(num_draft_tokens=case.gamma + 1), get_exec().graph.override(cuda_graph_config=config), _dp(case):
            with patched(DecodeCudaGraphRunner, "capture", lambda self: None), \
                    get_parallel().override(tp_group=SimpleNamespace()):
                runner = DecodeCudaGraphRunner(_model_runner(case, get_context().server_args))
            captured = tuple(runner.capture_bs)
            bs, w = case.local_bs, case.batch_width
            n = bs * w
            fb = ForwardBatch(
                forward_mode=ForwardMode.TARGET_VERIFY if bs else ForwardMode.IDLE, batch_size=bs,
                input_ids=torch.arange(n), req_pool_indices=torch.arange(bs), seq_lens=torch.full((bs,), 7),
                out_cache_loc=torch.arange(n), seq_lens_sum=7 * bs, seq_lens_cpu=torch.full((bs,), 7),
                positions=torch.arange(n), capture_hidden_mode=CaptureHiddenMode.NULL,
                spec_info=DFlashVerifyInput(draft_token=None, positions=None, draft_token_num=w))
            if case.rank_counts is not None:  # what the scheduler's MLP-sync gather hands the batch
                fb.original_global_num_tokens_cpu = list(case.rank_counts)
                fb.global_num_tokens_cpu = [c * w for c in case.rank_counts]
                fb.can_run_decode_cuda_graph = case.can_run_vote
            obs = dict(captured_bs=captured, captured_width=int(runner.captured_req_width))
            try:
                if not runner.can_run_graph(fb):
                    return GraphObservation(admitted=False, **obs)
                runner.load_batch(fb)
            except Exception as e:
                return GraphObservation(admitted=False, error=f"{type(e).__name__}: {e}", **obs)
            view = runner.model_runner.attn_backend.views[-1]
            return GraphObservation(admitted=True, replay_bs=int(runner.bs), replay_tokens=int(view.input_ids.numel()),
                                    raw_bs=int(runner.raw_bs), **obs)
