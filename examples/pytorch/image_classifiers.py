"""The image classifiers dlbench-worker trains, as torchvision builds them, with the loss dlbench
computes: the one place PyTorch's side makes them, for the command engine's example
(train_image_classifier.py) and for bench/'s comparisons (bench/pytorch_image_models.py).

torchvision's resnet50 (v1.5: the stride on the 3x3 convolution), resnet152, vgg16 (without batch
norm), alexnet and inception_v3 with its auxiliary classifier (loss main + 0.4 * auxiliary, as
dlbench-worker's), 1,000 classes, torchvision's initialisation.
"""
CLASSIFIERS = ("resnet50", "resnet152", "vgg16", "alexnet", "inception_v3")
CLASSES = 1000
AUXILIARY_LOSS_WEIGHT = 0.4


def classifier(name):
    """(model, loss(output, labels)) for spec.model `name`: the network in train mode on the CPU."""
    if name not in CLASSIFIERS:
        raise ValueError(f"model {name!r}: allowed {', '.join(CLASSIFIERS)}")
    import torch  # here, so that the names above come without PyTorch (bench/'s drivers, a refusal)
    import torchvision
    cross_entropy = torch.nn.functional.cross_entropy
    if name == "inception_v3":
        model = torchvision.models.inception_v3(aux_logits=True, init_weights=True)

        def loss(output, labels):
            return cross_entropy(output.logits, labels) + AUXILIARY_LOSS_WEIGHT * cross_entropy(output.aux_logits, labels)
    else:
        model = getattr(torchvision.models, name)()
        loss = cross_entropy
    model.train()
    return model, loss
