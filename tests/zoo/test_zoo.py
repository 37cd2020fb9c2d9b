import jax
import jax.numpy as jnp
import pytest

from nas.graph import Model
from nas.zoo import build, builder, cnn, efficientnet, resnetv1, vit


def param_count(graph, constants, image_size):
    shapes = jax.eval_shape(
        lambda: Model(graph, constants).init(jax.random.PRNGKey(0),
                                             jnp.ones((1, image_size, image_size, 3))))
    return sum(x.size for x in jax.tree.leaves(shapes["params"])), set(shapes)


@pytest.mark.parametrize("build_fn,image_size,expected,collections", [
    (cnn.CifarNet, 32, 2_192_458, {"params"}),
    (lambda: resnetv1.ResNet18(num_classes=10, input_resolution="small"), 32, 11_178_058,
     {"params", "batch_stats"}),
    (lambda: resnetv1.ResNet50(num_classes=1000, input_resolution="large"), 224, 25_561_128,
     {"params", "batch_stats"}),
    (lambda: efficientnet.EfficientNetB0(num_classes=1000), 224, 5_288_548,
     {"params", "batch_stats"}),
    (lambda: efficientnet.EfficientNetB1(num_classes=1000), 240, 7_794_184,
     {"params", "batch_stats"}),
    (lambda: vit.ViT_Ti16(num_classes=1000), 224, 5_717_032, {"params"}),
])
def test_parameter_counts_match_reference(build_fn, image_size, expected, collections):
    graph, constants, _ = build_fn()
    assert param_count(graph, constants, image_size) == (expected, collections)


def test_op_counts_and_names():
    graph, _, blocks = resnetv1.ResNet18(num_classes=10)
    assert len(graph.ops) == 69
    assert graph.ops[5].name == "resnet_stride1_filtermul1_basic11/conv0"
    assert len(blocks) == 8
    graph, _, _ = cnn.CifarNet()
    assert graph.ops[4].name == "conv_layer1/conv"


@pytest.mark.parametrize("name,image_size", [
    ("cnn", 32), ("resnet18", 32), ("b0", 32), ("ti/16", 32), ("resnet50", 64),
])
def test_forward_pass_small_batch(name, image_size):
    """CifarNet runs for real (the other models run in the mutation and training tests); the
    rest are traced end to end (init + apply) without executing, which checks every op's
    shapes at a fraction of the cost."""
    graph, constants, _ = build(name, num_classes=10, image_size=image_size)
    model = Model(graph, constants)
    x = jnp.ones((2, image_size, image_size, 3))

    def forward(key, images):
        return model.apply(model.init(key, images), images)

    if name == "cnn":
        logits = jax.jit(forward)(jax.random.PRNGKey(0), x)
        assert bool(jnp.all(jnp.isfinite(logits)))
    else:
        logits = jax.eval_shape(forward, jax.random.PRNGKey(0), x)
    assert logits.shape == (2, 10)


def test_rebuild_from_modified_blocks():
    make = builder("resnet18", num_classes=10, image_size=32)
    graph, constants, blocks = make()
    fewer, _, fewer_blocks = make(blocks=blocks[:1] + blocks[2:])
    assert len(fewer_blocks) == 7 and len(fewer.ops) == len(graph.ops) - 7
    cifar = builder("cnn", 10, 32)
    _, _, cblocks = cifar()
    deeper, constants, _ = cifar(blocks=cblocks + [cblocks[0]])
    assert param_count(deeper, constants, 32)[0] > 2_192_458 - 2_000_000


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown model_name 'vgg'"):
        build("vgg", 10, 32)


def test_extra_builder_arguments_from_the_config_reach_the_model():
    """`train.model` (e.g. `--config.model.depth=4`) are the builder's extra arguments."""
    graph, _, _ = build("revnet", 10, 32, {"depth": 4, "width": 8})
    couplings = {"/".join(op.name.split("/")[:2]) for op in graph.ops if "/rev" in op.name}
    assert len(couplings) == 4
    stem = next(op for op in graph.ops if op.type.name == "CONV")
    assert stem.op_kwargs["features"] == 8
    assert builder("revnet", 10, 32, {"depth": 4})()[0].ops == \
        build("revnet", 10, 32, {"depth": 4})[0].ops


@pytest.mark.parametrize("name, model, message", [
    ("revnet", {"colour": 1}, "colour"),
    ("revnet", {"depth": 0}, "depth"),
    ("cnn", {"depth": 3}, "depth"),
    ("revnet", {"blocks": []}, "blocks"),
])
def test_a_bad_extra_builder_argument_is_one_value_error(name, model, message):
    with pytest.raises(ValueError, match=rf"train\.model .*{message}"):
        build(name, 10, 32, model)


@pytest.mark.parametrize("num_classes", [0, -3, 2.5, "10", True, None])
def test_num_classes_must_be_a_positive_int_for_every_builder(num_classes):
    # CifarNet and RevNet pass num_classes as a `K:` constant, checked only at run time.
    for make in (lambda: cnn.CifarNet(num_classes=num_classes),
                 lambda: build("cnn", num_classes, 32),
                 lambda: build("revnet", num_classes, 32)):
        with pytest.raises(ValueError, match="num_classes"):
            make()


@pytest.mark.parametrize("make, message", [
    (lambda: resnetv1.ResNet18(num_classes=10, num_filters=0), "num_filters"),
    (lambda: vit.ViT_Ti16(num_classes=10, image_size=-16), "image_size"),
    (lambda: vit.ViT_Ti16(num_classes=10, dropout=-0.1), "dropout"),
    (lambda: vit.base_vit(16, 192, 12, 768, 0, image_size=32, num_classes=10), "num_heads"),
])
def test_bad_sizes_of_resnet_and_vit_are_value_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()
