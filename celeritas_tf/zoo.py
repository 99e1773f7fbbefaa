"""The model zoo (:data:`ZOO`): a small multi-layer perceptron for smoke tests, and the paper's
four training models.

Celeritas (Xu et al.), section "Experimental Setup", trains Inception-V3 (batch 512), NMT (4 LSTM
layers of 2048 units, batch 512), a Transformer (12 layers, 16 heads, 2048 hidden units, batch 256)
and Tensor Holography (30 convolution layers of 24 filters, batch 32). Each factory below takes the
model's size knobs and returns a :class:`~celeritas_tf.models.ModelSpec` whose ``make_model`` builds
a fresh Keras model (``weights=None``: nothing is downloaded). Layers get explicit, deterministic
names, so op names are the same for every batch size. Sequence models are static graphs: recurrent
layers are unrolled (no ``While`` ops), so their op count grows with ``seq_len``.

``get_model(name, paper=True)`` gives the paper's configuration; the ``small_config`` of each entry
builds and runs one training step in seconds on one CPU core.
"""

from __future__ import annotations

from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.spec import ModelSpec, TensorSpec, ZooEntry
from celeritas_tf.tf import tensorflow

#: Every zoo model by name, in the order registered (the MLP first, then the paper's four).
ZOO: dict[str, ZooEntry] = {}


def register_model(entry: ZooEntry) -> ZooEntry:
    """Add ``entry`` to the zoo under its name."""
    ZOO[entry.name] = entry
    return entry


def _mlp(*, features: int = 16, hidden: int = 32, layers: int = 2, classes: int = 10) -> ModelSpec:
    """A small multi-layer perceptron: the quickest model to build and run (tests, smoke checks)."""
    for knob, value in {"features": features, "hidden": hidden, "layers": layers, "classes": classes}.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CeleritasInputError(f"model 'mlp': {knob} must be a positive integer, got {value!r}")

    def make() -> Any:
        import keras  # lazy: TensorFlow loads only when a model is built

        inputs = keras.Input((features,), name="features")
        x = inputs
        for i in range(layers):
            x = keras.layers.Dense(hidden, activation="relu", name=f"dense_{i}")(x)
        outputs = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, outputs, name="mlp")

    return ModelSpec(
        name="mlp", make_model=make,
        inputs=(TensorSpec("features", (features,)),),
        labels=TensorSpec("labels", (), "int32", high=classes),
        loss=_sparse_softmax_loss,
        config={"features": features, "hidden": hidden, "layers": layers, "classes": classes},
        description="multi-layer perceptron (smoke tests)",
    )


def _sparse_softmax_loss(labels: Any, logits: Any) -> Any:
    """Mean sparse softmax cross-entropy of ``logits`` (last axis classes) against int ``labels``."""
    tf = tensorflow()
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


register_model(ZooEntry("mlp", _mlp, "multi-layer perceptron (smoke tests)",
                        paper_config={}, paper_batch_size=128,
                        small_config={"features": 16, "hidden": 32, "layers": 2, "classes": 10}))


def _keras() -> Any:
    """``keras``, imported after TensorFlow is set up (graph mode, quiet, oneDNN rewrites off)."""
    tensorflow()
    import keras  # lazy: TensorFlow loads only when a model is built

    return keras


def _check_positive(model: str, **knobs: Any) -> None:
    for name, value in knobs.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CeleritasInputError(f"model {model!r}: {name} must be a positive integer, got {value!r}")


# --------------------------------------------------------------------------------------------------
# Inception-V3 (Szegedy et al. 2016)


def inception_v3(*, image_size: int = 299, classes: int = 1000) -> ModelSpec:
    """Keras's Inception-V3 (random weights) on ``image_size``² RGB images, logits over ``classes``."""
    _check_positive("inception_v3", image_size=image_size, classes=classes)
    if image_size < 75:
        raise CeleritasInputError(f"model 'inception_v3': image_size must be at least 75, got {image_size}")

    def make() -> Any:
        keras = _keras()
        return keras.applications.InceptionV3(weights=None, input_shape=(image_size, image_size, 3),
                                              classes=classes, classifier_activation=None)

    return ModelSpec(
        name="inception_v3", make_model=make,
        inputs=(TensorSpec("images", (image_size, image_size, 3)),),
        labels=TensorSpec("labels", (), "int32", high=classes),
        loss=_sparse_softmax_loss,
        config={"image_size": image_size, "classes": classes},
        description="Inception-V3 image classifier (Szegedy et al. 2016)",
    )


# --------------------------------------------------------------------------------------------------
# NMT: GNMT-style LSTM sequence-to-sequence (Wu et al. 2016)

#: GNMT adds residual connections around the LSTM layers from the third layer on.
_NMT_FIRST_RESIDUAL = 2


def nmt(*, layers: int = 4, units: int = 2048, seq_len: int = 50, vocab: int = 32000) -> ModelSpec:
    """GNMT-style sequence-to-sequence model with teacher forcing.

    Source and target token embeddings of ``units`` dimensions; ``layers`` stacked LSTM encoder
    layers and ``layers`` decoder layers of ``units`` units, unrolled over ``seq_len`` steps (a
    static graph); decoder layer ``i`` starts from encoder layer ``i``'s final (h, c) states; as in
    GNMT, layers from the third on have a residual connection (layer input + layer output); a dense
    projection gives ``vocab`` logits per target position. Unlike GNMT there is no attention and
    no bidirectional first encoder layer (the paper describes the model only as "4 layers, 2048
    units"). The paper gives no sequence length: ``seq_len=50`` is our choice.
    """
    _check_positive("nmt", layers=layers, units=units, seq_len=seq_len, vocab=vocab)

    def make() -> Any:
        keras = _keras()
        source = keras.Input((seq_len,), dtype="int32", name="source")
        target = keras.Input((seq_len,), dtype="int32", name="target")

        def lstm(name: str) -> Any:
            return keras.layers.LSTM(units, return_sequences=True, return_state=True, unroll=True, name=name)

        x = keras.layers.Embedding(vocab, units, name="encoder_embedding")(source)
        states = []
        for i in range(layers):
            out, h, c = lstm(f"encoder_lstm_{i}")(x)
            x = keras.layers.Add(name=f"encoder_residual_{i}")([x, out]) if i >= _NMT_FIRST_RESIDUAL else out
            states.append([h, c])
        y = keras.layers.Embedding(vocab, units, name="decoder_embedding")(target)
        for i in range(layers):
            out, _, _ = lstm(f"decoder_lstm_{i}")(y, initial_state=states[i])
            y = keras.layers.Add(name=f"decoder_residual_{i}")([y, out]) if i >= _NMT_FIRST_RESIDUAL else out
        logits = keras.layers.Dense(vocab, name="projection")(y)
        return keras.Model([source, target], logits, name="nmt")

    return ModelSpec(
        name="nmt", make_model=make,
        inputs=(TensorSpec("source", (seq_len,), "int32", high=vocab),
                TensorSpec("target", (seq_len,), "int32", high=vocab)),
        labels=TensorSpec("labels", (seq_len,), "int32", high=vocab),
        loss=_sparse_softmax_loss,
        config={"layers": layers, "units": units, "seq_len": seq_len, "vocab": vocab},
        description="GNMT-style LSTM sequence-to-sequence translation model (Wu et al. 2016)",
    )


# --------------------------------------------------------------------------------------------------
# Transformer (Vaswani et al. 2017)

_POSITION_EMBEDDING: Any = None


def _position_embedding_layer() -> Any:
    """A Keras layer adding a learned ``(seq_len, hidden)`` position embedding to its input."""
    global _POSITION_EMBEDDING
    if _POSITION_EMBEDDING is None:
        keras = _keras()

        class PositionEmbedding(keras.layers.Layer):
            def build(self, input_shape: Any) -> None:
                self.positions = self.add_weight(name="positions", shape=tuple(input_shape[1:]),
                                                 initializer="random_normal")

            def call(self, x: Any) -> Any:
                return x + self.positions

        _POSITION_EMBEDDING = PositionEmbedding
    return _POSITION_EMBEDDING


def transformer(*, layers: int = 12, heads: int = 16, hidden: int = 2048, ff: int = 8192, seq_len: int = 50,
                vocab: int = 32000) -> ModelSpec:
    """Encoder–decoder Transformer (post-layer-norm, as in Vaswani et al.) with teacher forcing.

    Token + learned position embeddings of ``hidden`` dimensions (shared by neither side);
    ``layers`` encoder blocks (multi-head self-attention, residual + layer norm, feed-forward
    ``hidden -> ff (ReLU) -> hidden``, residual + layer norm) and ``layers`` decoder blocks (causal
    self-attention, cross-attention to the encoder output, feed-forward, each with residual +
    layer norm); a dense projection gives ``vocab`` logits per target position. ``heads`` heads of
    ``hidden // heads`` dimensions each. No dropout.

    Paper configuration: the paper's "12 layers" are read as 12 encoder + 12 decoder blocks (as
    Tensor2Tensor's ``num_hidden_layers`` counts them; this also gives the op count nearer the
    paper's); "2048 hidden units" as the model width ``hidden``, with the usual
    ``ff = 4 * hidden = 8192``. The paper gives no sequence length or vocabulary:
    ``seq_len=50`` and ``vocab=32000`` are our choices, as for NMT.
    """
    _check_positive("transformer", layers=layers, heads=heads, hidden=hidden, ff=ff, seq_len=seq_len,
                    vocab=vocab)
    if hidden % heads:
        raise CeleritasInputError(
            f"model 'transformer': hidden ({hidden}) must be a multiple of heads ({heads})")

    def make() -> Any:
        keras = _keras()
        position_embedding = _position_embedding_layer()
        source = keras.Input((seq_len,), dtype="int32", name="source")
        target = keras.Input((seq_len,), dtype="int32", name="target")

        def attention(name: str) -> Any:
            return keras.layers.MultiHeadAttention(heads, hidden // heads, name=name)

        def add_norm(x: Any, y: Any, name: str) -> Any:
            added = keras.layers.Add(name=f"{name}_add")([x, y])
            return keras.layers.LayerNormalization(name=f"{name}_norm")(added)

        def feed_forward(x: Any, name: str) -> Any:
            h = keras.layers.Dense(ff, activation="relu", name=f"{name}_ff_1")(x)
            return add_norm(x, keras.layers.Dense(hidden, name=f"{name}_ff_2")(h), f"{name}_ff")

        x = keras.layers.Embedding(vocab, hidden, name="encoder_embedding")(source)
        x = position_embedding(name="encoder_positions")(x)
        for i in range(layers):
            name = f"encoder_{i}"
            x = add_norm(x, attention(f"{name}_self_attention")(x, x), f"{name}_self_attention")
            x = feed_forward(x, name)
        y = keras.layers.Embedding(vocab, hidden, name="decoder_embedding")(target)
        y = position_embedding(name="decoder_positions")(y)
        for i in range(layers):
            name = f"decoder_{i}"
            y = add_norm(y, attention(f"{name}_self_attention")(y, y, use_causal_mask=True),
                         f"{name}_self_attention")
            y = add_norm(y, attention(f"{name}_cross_attention")(y, x), f"{name}_cross_attention")
            y = feed_forward(y, name)
        logits = keras.layers.Dense(vocab, name="projection")(y)
        return keras.Model([source, target], logits, name="transformer")

    return ModelSpec(
        name="transformer", make_model=make,
        inputs=(TensorSpec("source", (seq_len,), "int32", high=vocab),
                TensorSpec("target", (seq_len,), "int32", high=vocab)),
        labels=TensorSpec("labels", (seq_len,), "int32", high=vocab),
        loss=_sparse_softmax_loss,
        config={"layers": layers, "heads": heads, "hidden": hidden, "ff": ff, "seq_len": seq_len,
                "vocab": vocab},
        description="encoder-decoder Transformer (Vaswani et al. 2017)",
    )


# --------------------------------------------------------------------------------------------------
# Tensor Holography (Shi et al. 2021)

_HOLOGRAPHY_OUTPUTS = 6
"""Amplitude and phase for each of red, green and blue."""


def tensor_holography(*, layers: int = 30, filters: int = 24, image_size: int = 384) -> ModelSpec:
    """Fully convolutional RGB-D -> hologram network of Shi et al. (Nature 2021).

    As in the authors' implementation: the RGB-D input (4 channels) is shifted to ``[-0.5, 0.5]``;
    ``layers`` 3x3 convolutions ("same" padding, bias), each followed by batch normalisation; ReLU
    after the first ``layers - 1`` (``filters`` filters each), with a skip connection adding the
    input of layer ``i - 2`` to the input of every odd layer ``i >= 3``; the last layer takes the
    previous output concatenated with the input and gives 6 channels (amplitude and phase for RGB)
    through tanh. Trained here with MSE against float targets of the output shape (the authors'
    focal-stack loss needs a wave propagation model, outside the network). ``image_size=384`` is
    the authors' training resolution.
    """
    _check_positive("tensor_holography", layers=layers, filters=filters, image_size=image_size)

    def make() -> Any:
        keras = _keras()
        rgbd = keras.Input((image_size, image_size, 4), name="rgbd")
        x_in = keras.layers.Rescaling(1.0, offset=-0.5, name="renormalize")(rgbd)
        layer_inputs: list[Any] = []
        outputs: list[Any] = []
        for i in range(layers):
            last = i == layers - 1
            if i == 0:
                x = x_in
            elif i < 3 or i % 2 == 0:
                x = outputs[i - 1]
            else:
                x = keras.layers.Add(name=f"skip_{i}")([outputs[i - 1], layer_inputs[i - 2]])
            layer_inputs.append(x)
            if last:
                x = keras.layers.Concatenate(name="concat_input")([x, x_in])
            x = keras.layers.Conv2D(_HOLOGRAPHY_OUTPUTS if last else filters, 3, padding="same",
                                    name=f"conv_{i}")(x)
            x = keras.layers.BatchNormalization(name=f"batch_norm_{i}")(x)
            outputs.append(keras.layers.Activation("tanh" if last else "relu", name=f"activation_{i}")(x))
        return keras.Model(rgbd, outputs[-1], name="tensor_holography")

    return ModelSpec(
        name="tensor_holography", make_model=make,
        inputs=(TensorSpec("rgbd", (image_size, image_size, 4)),),
        labels=TensorSpec("hologram", (image_size, image_size, _HOLOGRAPHY_OUTPUTS)),
        loss="mse",
        config={"layers": layers, "filters": filters, "image_size": image_size},
        description="Tensor Holography: fully convolutional RGB-D to hologram network (Shi et al. 2021)",
    )


# --------------------------------------------------------------------------------------------------

register_model(ZooEntry(
    "inception_v3", inception_v3, "Inception-V3 image classifier (Szegedy et al. 2016)",
    paper_config={"image_size": 299, "classes": 1000}, paper_batch_size=512,
    small_config={"image_size": 75, "classes": 10}))

register_model(ZooEntry(
    "nmt", nmt, "GNMT-style LSTM sequence-to-sequence model (Wu et al. 2016)",
    paper_config={"layers": 4, "units": 2048, "seq_len": 50, "vocab": 32000}, paper_batch_size=512,
    small_config={"layers": 3, "units": 32, "seq_len": 6, "vocab": 50}))

register_model(ZooEntry(
    "transformer", transformer, "encoder-decoder Transformer (Vaswani et al. 2017)",
    paper_config={"layers": 12, "heads": 16, "hidden": 2048, "ff": 8192, "seq_len": 50, "vocab": 32000},
    paper_batch_size=256,
    small_config={"layers": 1, "heads": 2, "hidden": 16, "ff": 32, "seq_len": 6, "vocab": 50}))

register_model(ZooEntry(
    "tensor_holography", tensor_holography, "Tensor Holography RGB-D to hologram CNN (Shi et al. 2021)",
    paper_config={"layers": 30, "filters": 24, "image_size": 384}, paper_batch_size=32,
    small_config={"layers": 4, "filters": 8, "image_size": 16}))
