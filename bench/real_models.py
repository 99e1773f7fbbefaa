"""Real Keras models for ``bench/bench_real.py``, as a user hands them to ``celeritas graph``.

Every function takes no argument and returns ``(model, loss, input_signature[,
label_signature])`` (docs/tensorflow.md, "User models"): the Keras application with random
weights (``weights=None``: nothing is downloaded) at its usual ImageNet input size and 1,000
classes, or a transformer encoder built from Keras layers. The benchmark extracts each training
step with ``celeritas graph --model real_models:FUNCTION`` (``PYTHONPATH`` holding ``bench/``,
``CELERITAS_MODEL_MODULES=real_models``); the hash of this file is part of the cached graphs'
key, so editing a model rebuilds them.

Nothing here imports TensorFlow at module level: listing the functions (:data:`MODELS`) stays cheap.
"""

from __future__ import annotations

from typing import Any

IMAGENET_CLASSES = 1000
SPARSE_LOSS = "sparse_categorical_crossentropy"

#: The transformer encoder's sizes (BERT-base-like width at 6 blocks; sequence length in tokens).
ENCODER = {"vocab": 32000, "seq_len": 128, "width": 512, "heads": 8, "ff": 2048, "blocks": 6}
#: A tiny encoder for tests: builds and extracts in seconds; activations outweigh its embeddings,
#: so at batch 16 on 4 devices of 80 % of its one-device peak some placers fit and some do not.
TINY_ENCODER = {"vocab": 64, "seq_len": 64, "width": 32, "heads": 4, "ff": 128, "blocks": 2}

Built = tuple[Any, ...]


def _image(app: str, size: int) -> Built:
    """``keras.applications.<app>`` at ``size``×``size``×3, 1,000 classes, random weights."""
    import keras

    model = getattr(keras.applications, app)(weights=None, input_shape=(size, size, 3),
                                             classes=IMAGENET_CLASSES)
    return model, SPARSE_LOSS, [(None, size, size, 3)]


def vgg16() -> Built:
    """VGG16, 224 px."""
    return _image("VGG16", 224)


def xception() -> Built:
    """Xception, 299 px (its default size)."""
    return _image("Xception", 299)


def inception_v3() -> Built:
    """InceptionV3, 299 px (its default size)."""
    return _image("InceptionV3", 299)


def resnet101() -> Built:
    """ResNet101, 224 px."""
    return _image("ResNet101", 224)


def nasnet_mobile() -> Built:
    """NASNetMobile, 224 px."""
    return _image("NASNetMobile", 224)


def convnext_tiny() -> Built:
    """ConvNeXtTiny, 224 px."""
    return _image("ConvNeXtTiny", 224)


def mobilenet_v3_large() -> Built:
    """MobileNetV3Large, 224 px (the larger of the two: more ops, the one trained at scale)."""
    return _image("MobileNetV3Large", 224)


def mobilenet_v3_small_tiny() -> Built:
    """MobileNetV3Small at 32 px and 10 classes: a real application small enough for tests."""
    import keras

    model = keras.applications.MobileNetV3Small(weights=None, input_shape=(32, 32, 3), classes=10)
    return model, SPARSE_LOSS, [(None, 32, 32, 3)]


def transformer_encoder() -> Built:
    """A post-norm transformer encoder with a language-model head (:data:`ENCODER` sizes)."""
    return _encoder(**ENCODER)


def transformer_encoder_tiny() -> Built:
    """The same encoder at :data:`TINY_ENCODER` sizes (tests)."""
    return _encoder(**TINY_ENCODER)


def _encoder(*, vocab: int, seq_len: int, width: int, heads: int, ff: int, blocks: int) -> Built:
    """Token and learned position embeddings, ``blocks`` × (self-attention, add & norm, feed-forward,
    add & norm), then a Dense over the vocabulary at every position (logits).

    The input signature is a ``tf.TensorSpec`` so the token placeholder is int32; the labels
    (one token id per position) follow from the sparse loss.
    """
    import keras
    import tensorflow as tf

    tokens = keras.Input((seq_len,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab, width, name="token_embedding")(tokens)
    x = _position_embedding(seq_len, width, name="position_embedding")(x)
    for i in range(blocks):
        attn = keras.layers.MultiHeadAttention(heads, width // heads, name=f"block{i}_attention")(x, x)
        x = keras.layers.LayerNormalization(name=f"block{i}_norm1")(keras.layers.Add()([x, attn]))
        h = keras.layers.Dense(ff, activation="gelu", name=f"block{i}_ff1")(x)
        h = keras.layers.Dense(width, name=f"block{i}_ff2")(h)
        x = keras.layers.LayerNormalization(name=f"block{i}_norm2")(keras.layers.Add()([x, h]))
    logits = keras.layers.Dense(vocab, name="lm_head")(x)
    model = keras.Model(tokens, logits, name="transformer_encoder")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return model, loss, [tf.TensorSpec((None, seq_len), tf.int32, name="tokens")], \
        tf.TensorSpec((None, seq_len), tf.int32, name="labels")


def _position_embedding_class() -> type:
    """The learned-position layer, defined on first use so Keras is imported only then."""
    import keras

    class PositionEmbedding(keras.layers.Layer):
        """Adds a learned ``(seq_len, width)`` table to its input (a ``(batch, seq_len, width)`` tensor)."""

        def __init__(self, seq_len: int, width: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.seq_len, self.width = seq_len, width

        def build(self, input_shape: Any) -> None:
            self.table = self.add_weight(shape=(self.seq_len, self.width), initializer="glorot_uniform",
                                         name="table")

        def call(self, x: Any) -> Any:
            return x + self.table

    return PositionEmbedding


def _position_embedding(seq_len: int, width: int, **kwargs: Any) -> Any:
    """A learned position embedding layer (see :func:`_position_embedding_class`)."""
    return _position_embedding_class()(seq_len, width, **kwargs)


#: The benchmark's models: the names of their functions in this module (and of the table's rows).
MODELS: tuple[str, ...] = ("vgg16", "xception", "inception_v3", "resnet101", "nasnet_mobile", "convnext_tiny",
                           "mobilenet_v3_large", "transformer_encoder")
#: Small models for tests (run by the benchmark only when named with ``--models``).
TEST_MODELS: tuple[str, ...] = ("mobilenet_v3_small_tiny", "transformer_encoder_tiny")
