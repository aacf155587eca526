"""The ViT's configuration: the presets (so400m, b16, g14, and custom, with timm's eval
preprocessing for each), `VitConfig` (model.* keys for name=vit) and its checks, and which
casts model.fp8_centering centres. Separate from vit.py (the graph builders) so that the
configuration stage (precheck.py), the independent model's weight check (model_check.py)
and the builders read one definition, and a preset is edited without touching a graph."""
from __future__ import annotations

from dataclasses import dataclass

from . import photos
from .centering import NORMS
from .config import check_positive
from .image import MEAN, STD, check_preprocess
from .weights import check_path

CENTRED = {"norms": NORMS, "norms+attn": NORMS + ("attn",)}   # model.fp8_centering -> the casts centred

# timm 1.0's vit_so400m_patch14_siglip_384(.webli) and vit_base_patch16_224(.augreg2_in21k_ft_in1k;
# .augreg_in21k_ft_in1k alike). Preprocessing from their pretrained cfgs in
# timm/models/vision_transformer.py: `_cfg` gives crop_pct 0.9, bicubic, IMAGENET_INCEPTION
# mean/std (0.5, 0.5, 0.5); neither entry overrides them (the so400m one sets only input_size
# 384 and num_classes 0), so so400m resizes to ⌊384/0.9⌋ = 426 and crops 384. Exact-erf GELU
# (timm's nn.GELU) in both.
_TIMM_EVAL = dict(crop_pct=0.9, interpolation="bicubic", mean=MEAN, std=STD)
PRESETS = {"so400m": dict(width=1152, layers=27, hidden=4304, heads=16, tokens=729, image=384, patch=14,
                          pool="map", **_TIMM_EVAL),
           "b16": dict(width=768, layers=12, hidden=3072, heads=12, tokens=197, image=224, patch=16,
                       pool="token", **_TIMM_EVAL),
           # ViT-g/14's dimensions (timm vit_giant_patch14_clip_224: 1408 wide, 40 deep, MLP 6144, 16 heads,
           # 224² in patches of 14, class token: 257) in b16's structure (class token + Linear classifier;
           # no CLIP pre-norm): ~1 B parameters, more than one chip holds (conf/model/vit_g14.yaml, issue #28)
           "g14": dict(width=1408, layers=40, hidden=6144, heads=16, tokens=257, image=224, patch=14,
                       pool="token", **_TIMM_EVAL)}
_CUSTOM = dict(pool="map", crop_pct=1.0, interpolation="bicubic", mean=MEAN, std=STD)   # preset custom


@dataclass(frozen=True)
class VitConfig:
    name: str = "vit"
    preset: str = "so400m"        # so400m | b16 | g14 | custom (then width..tokens below are used)
    scope: str = ""               # tower: image -> embedding | blocks: the encoder alone, seeded tokens in
    layers: int = 4
    width: int = 0                # 0: from the preset
    hidden: int = 0
    heads: int = 0
    tokens: int = 0               # blocks scope only (the tower's follow from image, patch, pool)
    token_align: int = 2          # pad the token count with masked tokens to a multiple of this: 2 (rows are
                                  # whole 32-bit words) or 4 (a row of keys whole 64-bit words: softmax row
                                  # chunks of one row, experiments/comm/README.md "vector gap")
    image: int = 0                # tower: image side in pixels (0: preset)
    patch: int = 0                # tower: patch side (0: preset)
    pool: str = ""                # tower head: map (SigLIP attention pool) | token (class token + Linear)
    classes: int = 1000           # pool=token: classifier outputs
    batch: int = 1                # tower: images per run (model.input: a list of that many files, or a stacked array)
    attention: str = "materialized"  # materialized: S and P stored per (image, head) | flash: one flash_attention | auto: the cheaper by plan + expand (compiler/attn_choice.py)
                                     # op, S never stored beyond a key block (issue #27: what lets B >= 6 fit)
    weight_dtype: str = "fp8"
    gelu: str = "erf"
    eps: float = 1e-6
    weights: str = ""             # .npz or .safetensors with timm names; "" = seeded
    input: str | list = ""        # tower: image file(s) (PNG/JPEG), photo:NAME (models/photos.py) or .npy/.npz
                                  # pixels; "" = seeded images; photo:held_out = the first `batch` held-out
                                  # photos (read as that list: __post_init__)
    crop_pct: float = 0.0         # tower preprocessing (timm's eval transform); 0 / "" / [] = the preset's
    interpolation: str = ""
    mean: tuple | list = ()
    std: tuple | list = ()
    fp8_activations: bool = False  # cast the inputs of QKV, proj, fc1, fc2 to FP8, one scale per layer:
    fp8_scales: str = "least_error"  # least_error (the least error on calibration inputs, >= headroom ·
                                    # their amax) | calibrated (headroom · their amax) | bound (any input)
    calibration: int = 6           # least_error, calibrated: calibration inputs (never the trial's; at most 6 photos)
    fp8_calibration: str = "photos"  # photos: the first `calibration` of photos.CALIBRATION (never a held-out
                                     # photo) | seeded: seeded images (the encoder alone: always seeded tokens)
    fp8_headroom: float = 2.0      # scale >= headroom · calibration amax / 448 (the casts saturate above it)
    fp8_fallback: bool = True      # least_error: keep in f16 the casts whose calibration rounding error, relative
                                   # to their input's token-to-token part, exceeds fp8_fallback_error (their
                                   # matmul runs FP16 x FP8, at the f16 rate; calibrate.least_error_scales)
    fp8_fallback_error: float = 0.15  # (calibrate.py: between the errors of the casts kept and taken out)
    fp8_scores: bool = True        # with fp8_activations, materialized attention: q·kᵀ reads q and k in FP8
                                   # (a cast of the QKV output, one scale per layer; K read as micro-panels)
    fp8_centering: str = "norms"   # least_error, calibrated: cast the LayerNorm outputs (QKV's, fc1's input)
                                   # less their per-channel calibration means, folded into biases | norms+attn
                                   # (proj's input too: clips on new images) | none (models/centering.py)
    seed: int = 0

    @property
    def tower(self) -> bool:
        """scope "" (the dataclass default): the tower for a named preset or a custom one
        with an image size, else the blocks."""
        return self.scope == "tower" or (not self.scope and (self.preset != "custom" or bool(self.image)))

    def dims(self) -> dict:
        d = dict(PRESETS.get(self.preset, _CUSTOM))
        d.pop("layers", None)
        for k in ("width", "hidden", "heads", "tokens", "image", "patch", "pool", "crop_pct", "interpolation",
                  "mean", "std"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.tower and d.get("image") and d.get("patch"):
            d["tokens"] = (d["image"] // d["patch"]) ** 2 + (d["pool"] == "token")
        return d

    def __post_init__(self):
        object.__setattr__(self, "input", photos.expand(self.input, self.batch))

    def check(self):
        if self.weights:
            check_path(self.weights)
        if self.preset not in (*PRESETS, "custom"):
            raise ValueError(f"model.preset={self.preset!r}: not one of {', '.join(PRESETS)}, custom")
        if self.scope not in ("", "tower", "blocks"):
            raise ValueError(f"model.scope={self.scope!r}: not one of tower, blocks")
        check_positive(self, "layers", "classes", "batch", "calibration")
        if self.token_align not in (2, 4):
            raise ValueError(f"model.token_align={self.token_align!r}: not one of 2, 4")
        check_preprocess(self.crop_pct, self.interpolation, self.mean, self.std)
        if self.attention not in ("materialized", "flash", "auto"):
            raise ValueError(f"model.attention={self.attention!r}: not one of materialized, flash, auto")
        if self.fp8_scales not in ("least_error", "calibrated", "bound"):
            raise ValueError(f"model.fp8_scales={self.fp8_scales!r}: not one of least_error, calibrated, bound")
        if self.fp8_calibration not in ("photos", "seeded"):
            raise ValueError(f"model.fp8_calibration={self.fp8_calibration!r}: not one of photos, seeded")
        if self.fp8_activations and self.fp8_calibration == "photos" and self.calibration > len(photos.CALIBRATION):
            raise ValueError(f"model.calibration={self.calibration}: there are {len(photos.CALIBRATION)} "
                             f"calibration photos ({', '.join(photos.CALIBRATION)}; model.fp8_calibration=photos)")
        if self.fp8_centering not in CENTRED and self.fp8_centering != "none":
            raise ValueError(f"model.fp8_centering={self.fp8_centering!r}: not one of {', '.join(CENTRED)}, none")
        if not self.fp8_fallback_error > 0:
            raise ValueError(f"model.fp8_fallback_error={self.fp8_fallback_error!r}: must be > 0")
        if not self.fp8_headroom >= 1:
            raise ValueError(f"model.fp8_headroom={self.fp8_headroom!r}: must be >= 1 (below 1 clips the "
                             f"calibration data itself)")
        d = self.dims()
        keys = ("width", "hidden", "heads", "tokens") + (("image", "patch") if self.tower else ())
        for k in keys:
            if not isinstance(d.get(k), int) or d[k] <= 0:
                raise ValueError(f"model.{k}={d.get(k)!r}: must be a positive integer (preset custom)")
        if d["width"] % d["heads"] or (d["width"] // d["heads"]) % 2:
            raise ValueError(f"model.width={d['width']} must split into model.heads={d['heads']} "
                             f"heads of an even size")
        for k in ("width", "hidden"):
            if d[k] % 4:
                raise ValueError(f"model.{k}={d[k]}: must be a multiple of 4 (FP8 rows move as words)")
        if self.tower:
            if d["image"] < d["patch"]:
                raise ValueError(f"model.image={d['image']} is smaller than model.patch={d['patch']}")
            if d["pool"] not in ("map", "token"):
                raise ValueError(f"model.pool={d['pool']!r}: not one of map, token")
            if d["pool"] == "token" and self.classes % 4:
                raise ValueError(f"model.classes={self.classes}: must be a multiple of 4 (FP8 rows move as words)")
        if self.weight_dtype not in ("f16", "fp8") or self.gelu not in ("tanh", "erf"):
            raise ValueError(f"model.weight_dtype={self.weight_dtype!r} / model.gelu={self.gelu!r}: "
                             f"expected f16|fp8 and tanh|erf")
