# lit configuration for shardc's golden IR and diagnostic tests.
# Run through tests/run-tests, which passes -Dshardc=PATH.
import os
import shutil
import lit.formats

config.name = 'shardc'
config.test_format = lit.formats.ShTest(True)
config.suffixes = ['.tdsl', '.test']
config.excludes = ['Inputs']
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(lit_config.params.get('build', 'build'), 'lit')

root = os.path.dirname(os.path.dirname(config.test_source_root))
shardc = os.path.abspath(lit_config.params.get('shardc', os.path.join(root, 'build', 'shardc')))
config.substitutions.append(('%shardc', shardc))
config.substitutions.append(('%samples', os.path.join(root, 'samples')))
config.substitutions.append(('%expect-exit', os.path.join(root, 'tests', 'tools', 'expect-exit')))
config.environment['PATH'] = os.pathsep.join(['/usr/lib/llvm-14/bin', config.environment.get('PATH', os.environ.get('PATH', ''))])
# The build cache's settings: tests/run-tests points SHARDC_CACHE_DIR at the
# build tree, and lit passes on only what it is told to.
for var in ('ASAN_OPTIONS', 'UBSAN_OPTIONS', 'SHARDC_CACHE', 'SHARDC_CACHE_DIR', 'SHARDC_CACHE_MAX'):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# Graphviz's dot (tools/install-deps installs it): the tests that draw
# `shardc show --format dot` need it.
if shutil.which('dot'):
    config.available_features.add('graphviz')
