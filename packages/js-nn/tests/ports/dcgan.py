"""The DCGAN tutorial's generator, discriminator and ``weights_init``, ported to js.

Source: PyTorch's DCGAN tutorial (``beginner_source/dcgan_faces_tutorial.py``), at the
tutorial's architecture with smaller widths (``nz``, ``ngf``, ``ndf``; 64x64 images as there).
``torch_dcgan.py`` holds the PyTorch side as the tutorial writes it. Changes, marked
``# port:`` (listed in docs/porting.md):

1. ``import js.nn as nn`` for ``import torch.nn as nn``.
2. ``rngs``: the constructors take ``rngs`` and pass it to the convolutions; ``weights_init``
   draws from a module-level ``js.Rngs`` (torch: the global generator) through ``rngs=``.
"""

import js
import js.nn as nn  # port: was `import torch.nn as nn`

nc, nz, ngf, ndf = 3, 16, 8, 8  # the tutorial: 3, 100, 64, 64

init_rngs = js.Rngs(params=0)  # port: torch's weights_init draws from the global generator


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02, rngs=init_rngs)  # port: rngs=
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02, rngs=init_rngs)  # port: rngs=
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self, ngpu, *, rngs):  # port: rngs
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False, rngs=rngs),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # state size. (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False, rngs=rngs),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False, rngs=rngs),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False, rngs=rngs),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False, rngs=rngs),
            nn.Tanh(),
            # state size. (nc) x 64 x 64
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ngpu, *, rngs):  # port: rngs
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is (nc) x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False, rngs=rngs),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False, rngs=rngs),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False, rngs=rngs),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False, rngs=rngs),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False, rngs=rngs),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input)
