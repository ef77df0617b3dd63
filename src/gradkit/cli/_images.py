"""DATA as a folder of images in class sub-folders (`keras.utils.image_dataset_from_directory`'s layout)
for `gradkit evaluate`: read a batch at a time, never all at once.

The class ids are the sub-folders' names in sorted order (as Keras' `class_names`), the images those
under each sub-folder (its own sub-folders included) in sorted order, class after class; each is loaded
with `keras.utils.load_img` as RGB, resized to `--image-size` (bilinear, as Keras' default), as float32
in [0, 255] (so `--clip-values 0,255`, or a model that rescales its input).
"""

import os

import numpy as np

from gradkit.cli._inputs import InputError

EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


def _files(folder):
    found = []
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs.sort()
        found += [os.path.join(root, n) for n in sorted(names) if n.lower().endswith(EXTENSIONS)]
    return found


class ImageFolder:
    """The images under `root/<class>/`, iterated as `(x float32 (b, H, W, 3), y int64 (b,))` batches of
    `batch` images, each read when its batch is.

    Attributes:
        class_names: the sub-folders' names, sorted: class id k is `class_names[k]`.
        files: `(path, class id)` of every image, in the order of the batches.
        input_shape: `(H, W, 3)`.
    """

    def __init__(self, root, image_size, batch, limit=None):
        self.class_names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.files = [
            (path, k) for k, name in enumerate(self.class_names) for path in _files(os.path.join(root, name))
        ][:limit]
        if not self.files:
            raise InputError(
                f"`DATA` folder {root!r} must hold class sub-folders of images ({', '.join(EXTENSIONS)}), "
                f"as keras.utils.image_dataset_from_directory reads. Received: sub-folders {self.class_names}"
            )
        self.image_size, self.batch = tuple(image_size), int(batch)
        self.input_shape = (*self.image_size, 3)

    def __len__(self):
        return len(self.files)

    def __iter__(self):
        import keras

        for start in range(0, len(self.files), self.batch):
            part = self.files[start : start + self.batch]
            images = [
                keras.utils.img_to_array(
                    keras.utils.load_img(
                        path, color_mode="rgb", target_size=self.image_size, interpolation="bilinear"
                    )
                )
                for path, _ in part
            ]
            yield np.stack(images).astype(np.float32), np.array([k for _, k in part], np.int64)


def image_folder(path, image_size, batch, limit=None):
    """The `ImageFolder` at `path` for `--image-size` `image_size` (H,W); InputError without one."""
    if image_size is None or len(image_size) != 2 or min(image_size) < 1:
        raise InputError(
            "`--image-size` must be H,W (two ints >= 1, the size each image is resized to) when DATA is a "
            f"folder of images. Received: --image-size={image_size}"
        )
    return ImageFolder(path, image_size, batch, limit)
