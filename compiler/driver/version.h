/* shardc's version: `shardc --version`, and part of every build cache key. */
#ifndef SHARDC_VERSION_H
#define SHARDC_VERSION_H

#define SHARDC_VERSION "0.1.0"

#endif
